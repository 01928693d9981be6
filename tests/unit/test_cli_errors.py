"""A mistyped command line gets the one line that says what is wrong and where to read more, as git and
cargo answer, not a screen of usage above it (issue 46). End to end: ``python -m gputui`` in subprocesses."""

import os

import pytest
from cli_helpers import ROOT, gputui

HINT = "see 'gputui --help'"
SCENARIOS = "workstation, training-node, leaky, mig, faults, dataparallel, torchrun, shared-k8s"


@pytest.fixture
def env(tmp_path):
    """A private config directory: the answers below come from the parser, before any config is read."""
    return {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CONFIG_HOME": str(tmp_path)}


@pytest.mark.parametrize(("words", "said"), [
    (["--demo", "nosuch"],
     ["gputui: error: argument --demo: invalid choice: 'nosuch' (choose from " + SCENARIOS + ")", HINT]),
    (["--bogus"], ["gputui: error: unrecognized arguments: --bogus", HINT]),
    (["--interval", "0"],
     ["gputui: error: argument --interval: must be a positive number of seconds (0.1 or more), not 0", HINT]),
    (["--theme", "pink"], ["gputui: error: argument --theme: invalid choice: 'pink' (choose from dark, light)", HINT]),
    (["record", "--duration", "abc"],
     ["gputui record: error: argument --duration: not a duration: 'abc' (e.g. 90s, 30m, 2h)",
      "see 'gputui record --help'"]),
    (["run"],
     ["gputui run: error: give the command to run, e.g. gputui run -- python train.py", "see 'gputui run --help'"]),
])
def test_a_wrong_argument_is_one_line_and_a_hint(env, words, said):
    result = gputui(env, *words)
    assert (result.returncode, result.stderr.splitlines(), result.stdout) == (2, said, "")


@pytest.mark.parametrize(("words", "said"), [
    (["estimate", "job.py:build", "--optimizer", "lion"],
     "gputui estimate: error: argument --optimizer: invalid choice: 'lion' "
     "(choose from adam, adamw, sgd, sgd-plain, adagrad, rmsprop)"),
    (["--alert-webhook-format", "teams"],
     "gputui: error: argument --alert-webhook-format: invalid choice: 'teams' (choose from json, slack, ntfy)"),
    (["demo-train", "--leak", "memory"],
     "gputui demo-train: error: argument --leak: invalid choice: 'memory' (choose from graph, outputs, cache)"),
])
def test_every_choice_is_listed_the_same_way(env, words, said):
    """Pythons word argparse's own "invalid choice" two ways ('dark', 'light' or dark, light: CPython
    gh-117766, gh-144983): gputui's choices are checked by gputui, so the line is the same on every Python."""
    result = gputui(env, *words)
    assert (result.returncode, result.stderr.splitlines()[0]) == (2, said)


def test_help_still_shows_the_usage(env):
    result = gputui(env, "record", "--help")
    assert result.returncode == 0 and result.stdout.startswith("usage: gputui record [-h] ")
