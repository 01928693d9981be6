"""Alerts about a real job whose argv[0] and TORCHELASTIC_RUN_ID are as long as Linux lets one string be
(128 KiB) and whose run id carries escapes, watched by `gputui --watch 1 --alert-command`: the command is
still started (its GPUTUI_ALERT_* values cut, the cut said, the key made visible), its stdin carries the
whole document, and the alerts that come later in the same delivery reach it.

Two ranks with the probe (tests/huge_name_job.py): rank 1 steps six times slower, a straggler whose
alert's title quotes the job's name (argv[0]) and whose key quotes its run id. One delivery a minute
([alerts] per_minute = 1): rank 1 is stopped (the straggler's end) and then rank 0 starts leaking (a leak
alert); both wait for the next minute and go together, the huge ending first, as a busy monitor groups them.
"""

import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
from alert_receivers import received, recording_receiver
from alert_watch import stop

from gputui.alerts import delivery
from gputui.untrusted import MARK_ROOM

pytestmark = pytest.mark.slow
pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
ARGV0 = "x" * 131_060  # MAX_ARG_STRLEN is 131072 bytes with the NUL: a title that quotes it is longer
RUN_ID = "\x1b]0;owned\x07\n" + "r" * 131_020  # as long as TORCHELASTIC_RUN_ID=... may be
WITHIN = 90.0  # seconds for each step below, on a loaded 2-core machine


def wait_for(check, seconds: float, why: str):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    pytest.fail(why)


def test_a_job_with_a_128_kib_argv0_and_run_id_still_reaches_the_alert_command(tmp_path):
    probes = tmp_path / "probes"
    probes.mkdir(mode=0o700)
    (tmp_path / "config" / "gputui").mkdir(parents=True)
    (tmp_path / "config" / "gputui" / "config.toml").write_text(
        '[alerts]\nkinds = ["straggler", "leak"]\nper_minute = 1\n')
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "GPUTUI_PROBE")}
    env.update(GPUTUI_PROBE_DIR=str(probes), PYTHONPATH=str(ROOT), XDG_CONFIG_HOME=str(tmp_path / "config"),
               OMP_NUM_THREADS="1")
    # Python finds itself from argv[0] along PATH, and fails on a name this long: without PATH it looks no
    # further, and PYTHONPATH gives it the environment's packages.
    rank_env = {k: v for k, v in env.items() if k != "PATH"}
    rank_env.update(PYTHONPATH=f"{ROOT}:{sysconfig.get_paths()['purelib']}", TORCHELASTIC_RUN_ID=RUN_ID,
                    WORLD_SIZE="2")
    leak = tmp_path / "leak"
    ranks = [subprocess.Popen([ARGV0, str(ROOT / "tests" / "huge_name_job.py"), str(seconds), str(leak)],
                              executable=sys.executable, env={**rank_env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
             for rank, seconds in ((0, 0.05), (1, 0.3))]
    receiver = recording_receiver(tmp_path)
    said = tmp_path / "watch.stderr"
    watch = None
    try:
        wait_for(lambda: len(list(probes.iterdir())) == 2, WITHIN, "the ranks' probes never appeared")
        with open(said, "w") as stderr:
            watch = subprocess.Popen([sys.executable, "-m", "gputui", "--watch", "1", "--alert-command",
                                      str(receiver)], env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr)
        wait_for(lambda: "alert: [warning] rank 1 of" in said.read_text(), WITHIN,
                 f"no straggler alert: {said.read_text()[-2000:]}")
        first = time.monotonic()
        stop(ranks[1], group=True)  # the straggler's end: the huge alert's event, first in the next delivery
        time.sleep(5)
        leak.touch()  # then a leak on rank 0
        wait_for(lambda: "alert: [warning] process" in said.read_text(), WITHIN,
                 f"no leak alert: {said.read_text()[-2000:]}")
        wait_for(lambda: len(list((tmp_path / "got").iterdir())) >= 2, max(0.0, first + 60 - time.monotonic()) + 30,
                 f"the second delivery never came: {said.read_text()[-2000:]}")
    finally:
        if watch is not None:
            stop(watch)
        for rank in ranks:
            stop(rank, group=True)
    time.sleep(0.5)  # (the receiver's last files)
    (straggler, document), (later, grouped) = received(tmp_path)[:2]
    event = document["events"][0]
    title, key = event["alert"]["title"], event["alert"]["key"]
    assert (event["change"], event["alert"]["kind"]) == ("started", "straggler")
    # The collector may cut what a process set itself where it takes it in (gputui.untrusted.bounded); the
    # channel cuts what is still too long for an environment, and the document has it whole either way.
    assert title.startswith(f"rank 1 of {ARGV0[:200]}") and title.endswith(" (torchelastic) lags the others")
    assert key.startswith(f"job torchelastic {RUN_ID[:200]}") and key.endswith(f" pid {ranks[1].pid}")
    assert straggler["TITLE"] == title if len(title) <= delivery.ENV_VALUE else (
        straggler["TITLE"] == title[:len(straggler["TITLE"]) - len(cut_mark(title))] + cut_mark(title))
    assert len(straggler["TITLE"]) <= delivery.ENV_VALUE and len(straggler["KEY"]) <= delivery.ENV_VALUE
    assert straggler["KEY"].startswith("job torchelastic \\x1b]0;owned\\x07\\nrrr")  # made visible
    assert [(e["change"], e["alert"]["kind"]) for e in grouped["events"]][:2] == [
        ("ended", "straggler"), ("started", "leak")]
    assert grouped["events"][1]["alert"]["pid"] == ranks[0].pid
    assert later["CHANGE"] == "ended" and later["COUNT"] == str(len(grouped["events"]))
    assert "Argument list too long" not in said.read_text()


def cut_mark(text, most=delivery.ENV_VALUE):
    return f"...(cut {len(text) - (most - MARK_ROOM)} characters)"
