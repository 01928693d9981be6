"""``gputui demo-train --leak KIND``: the classic leaks, caught by the probe inside the demo itself."""

from __future__ import annotations

import contextlib
import io

import pytest

torch = pytest.importorskip("torch")

from gputui.cli import Options  # noqa: E402
from gputui.errors import UserError  # noqa: E402
from gputui.link import paths  # noqa: E402
from gputui.model import StepRecord  # noqa: E402
from gputui.options import DemoTrainOptions  # noqa: E402
from gputui.probe import demo, runtime  # noqa: E402


@pytest.fixture(autouse=True)
def quick_and_deterministic(tmp_path, monkeypatch, one_torch_thread):
    directory = tmp_path / "p"
    directory.mkdir(mode=0o700)
    monkeypatch.setenv(paths.DIR_ENV, str(directory))
    real_start = runtime.start
    # Every step measured and the leak checked every 16 steps, whatever the machine's speed.
    monkeypatch.setattr(runtime, "start", lambda **kw: real_start(**{**kw, "budget": 1.0}))
    monkeypatch.setattr(runtime, "LEAK_CHECK_SHARE", 1.0)
    monkeypatch.setattr(demo, "EVERY", 60)


def run(leak) -> list[str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert demo.demo_train(Options(mode="demo-train", demo_train=DemoTrainOptions(steps=120, leak=leak))) == 0
    assert runtime.current() is None  # stopped again
    return out.getvalue().splitlines()


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("leak, says", [
    ("graph", "keeps each step's evaluation loss with its graph"),
    (True, "keeps each step's evaluation loss with its graph"),  # a bare --leak
    ("outputs", "appends each step's evaluation output"),
    ("cache", "stores a new tensor per step in a dict"),
])
def test_each_leak_is_announced_and_caught(leak, says):
    lines = run(leak)
    assert says in lines[1]
    last = lines[-1]
    assert last.startswith("step    120") and "probe's verdict: leak" in last, last
    assert "(sites recorded over 12 steps)" in last


def test_without_a_leak_the_verdict_is_clean():
    lines = run(None)
    assert not any(line.startswith("The loop ") for line in lines)
    assert lines[-1].startswith("step    120") and lines[-1].endswith("probe's verdict: clean")


def test_an_unknown_leak_is_a_user_error():
    with pytest.raises(UserError, match="unknown leak 'fast'; choose one of: graph, outputs, cache"):
        demo.demo_train(Options(mode="demo-train", demo_train=DemoTrainOptions(steps=1, leak="fast")))


def test_progress_shows_the_figure_the_verdict_is_judged_on():
    cpu = [StepRecord(1, 0.0, device="cpu", allocated=7 << 20, host_allocated=130 << 20),
           StepRecord(2, 0.0, device="cpu")]
    assert demo.memory_now(cpu) == "heap in use 130.0 MiB"  # not the tracked tensors' 7 MiB
    cuda = [StepRecord(1, 0.0, device="cuda:0", allocated=3 << 30)]
    assert demo.memory_now(cuda) == "allocated 3072.0 MiB"
    assert demo.memory_now([]) == "memory not read yet"


def test_the_demo_loops_leak_holder_is_looked_into_as_the_users_code():
    # The keeping line of `demo-train --leak` is in gputui's own demo module, which stands in for the
    # user's code; gputui's other objects (the probe's board) are never looked into.
    from gputui.probe import board, keepers

    assert keepers._holds_attributes(demo.Leak("graph"))
    assert not keepers._holds_attributes(board.Board())
    leak = demo.Leak("outputs")
    first = keepers.look()
    leak.outputs.append(torch.zeros(3, requires_grad=True) * 2)
    grown = keepers.growing(first, keepers.look(), 1)
    assert grown and grown[0][0][2:] == ("attribute", "leak.outputs")
    assert keepers.keeping_lines(*grown[0][0]) == [demo.Leak.after_step.__code__.co_firstlineno + 4]
