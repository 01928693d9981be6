"""torch's private APIs, each behind one small module of the probe: where a function is missing or its
signature changed, the module answers "not available", the probe's problems say why, and nothing is
raised into the job, whose training loop goes on under the probe."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gputui.model.probe import LIMIT_HOOKS_UNAVAILABLE, LIMIT_LOSS_OUTSIDE  # noqa: E402
from gputui.probe import (  # noqa: E402
    allocator_history,
    backward_pass,
    compiled,
    oom_observer,
    runtime,
    saved_tensor_hooks,
    sites,
)
from gputui.probe.board import Board, Problems  # noqa: E402
from gputui.probe.oom import OomWatch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import loops  # noqa: E402

pytestmark = [
    pytest.mark.usefixtures("one_torch_thread"),
    # (what importing torch._dynamo says of torch.jit on torch 2.13, not of the probe)
    pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"),
]

_AUTOGRAD = torch._C._autograd
_TOP = "_top_saved_tensors_default_hooks"


@pytest.fixture(autouse=True)
def _no_probe_left():
    yield
    runtime.stop()


def not_available(problems: Problems, where: str) -> list[str]:
    return [line for line in problems.lines() if line.startswith(f"{where}: not available: ")]


def test_a_state_not_available_is_said_once():
    problems = Problems()
    for _ in range(3):
        problems.unavailable("OOM observer", "missing")
    problems.record("pack", ValueError("x"))
    problems.record("pack", ValueError("x"))
    assert problems.lines() == ("OOM observer: not available: missing", "pack: ValueError: x (x2)")


# -- saved-tensor hooks: the look at the top of autograd's hook stack --------------------------------

def _pair():
    return (lambda tensor: tensor), (lambda packed: packed)


@pytest.mark.parametrize("replacement, why", [
    (None, "has no torch._C._autograd._top_saved_tensors_default_hooks"),
    (lambda a, b: None, "takes neither (ignore_is_tracing) nor no argument"),
    (lambda *args: "hooks", "answered a str, not None or a (pack, unpack) pair"),
])
def test_saved_tensor_hooks_without_a_look_at_the_stack_are_not_available(monkeypatch, replacement, why):
    if replacement is None:
        monkeypatch.delattr(_AUTOGRAD, _TOP)
    else:
        monkeypatch.setattr(_AUTOGRAD, _TOP, replacement, raising=False)
    problems = Problems()
    hooks = saved_tensor_hooks.SavedTensorHooks(*_pair(), problems)
    assert hooks.available is False
    assert hooks.push() is False  # nothing pushed, nothing raised
    hooks.pop()
    (line,) = not_available(problems, "saved-tensor hooks")
    assert why in line and "activations are not watched" in line


def test_saved_tensor_hooks_of_older_torch_take_no_argument(monkeypatch):
    real = getattr(_AUTOGRAD, _TOP)
    monkeypatch.setattr(_AUTOGRAD, _TOP, lambda: real(False))
    problems = Problems()
    hooks = saved_tensor_hooks.SavedTensorHooks(*_pair(), problems)
    assert hooks.available and hooks.push() and hooks.on_top()
    hooks.pop()
    assert not hooks.on_top() and problems.lines() == ()


def test_the_users_own_saved_tensor_hooks_win():
    problems = Problems()
    hooks = saved_tensor_hooks.SavedTensorHooks(*_pair(), problems)
    with torch.autograd.graph.save_on_cpu():
        assert hooks.push() is False  # theirs stays the one applied
        hooks.pop()  # and is not popped by the probe
        assert saved_tensor_hooks.any_on_top() is True
    assert saved_tensor_hooks.any_on_top() is False and problems.lines() == ()


def test_a_push_refused_by_torch_is_a_problem_not_an_exception():
    problems = Problems()
    hooks = saved_tensor_hooks.SavedTensorHooks(*_pair(), problems)
    with torch.autograd.graph.disable_saved_tensors_hooks("no hooks here"):
        assert hooks.push() is False
    assert problems.lines() == ("saved-tensor hooks (push): RuntimeError: no hooks here",)


def test_the_probe_trains_on_without_saved_tensor_hooks_and_says_why(monkeypatch):
    monkeypatch.delattr(_AUTOGRAD, _TOP)
    job = loops.make_job()
    probe = runtime.start(serve=False)
    loops.clean(job, 6)
    report = probe.report()
    assert len(report.steps) == 6
    assert report.limits == (LIMIT_HOOKS_UNAVAILABLE,)
    assert report.devices[0].categories.activations is None  # unknown, not 0
    assert report.devices[0].categories.parameters > 0
    assert any("saved-tensor hooks: not available" in line for line in report.problems)


def test_the_probe_with_saved_tensor_hooks_sees_activations_and_leaves_none_behind():
    job = loops.make_job()
    probe = runtime.start(serve=False)
    loops.clean(job, 4)
    report = probe.report()
    assert report.limits == (LIMIT_LOSS_OUTSIDE,) and report.problems == ()
    assert report.steps[0].activations_peak > 0
    runtime.stop()
    assert saved_tensor_hooks.any_on_top() is False


# -- the CUDA allocator's history (site recording) ----------------------------------------------------

class Calls:
    def __init__(self):
        self.calls = []

    def __call__(self, enabled="all", context="all", stacks="all", max_entries=1, device=None):
        self.calls.append(dict(enabled=enabled, context=context, stacks=stacks, max_entries=max_entries))


def test_allocator_history_is_switched_on_and_off_with_the_probes_settings(monkeypatch):
    record = Calls()
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", record)
    problems = Problems()
    assert allocator_history.start(500, problems) is True
    allocator_history.stop(problems)
    assert record.calls == [
        dict(enabled="state", context="state", stacks="python", max_entries=500),
        dict(enabled=None, context="all", stacks="all", max_entries=1),
    ]
    assert problems.lines() == ()


def _old_form(enabled, record_context=True, trace_alloc_max_entries=1):  # torch 2.0's
    raise AssertionError("must not be called")


def _fails(enabled="all", context="all", stacks="all", max_entries=1):
    raise RuntimeError("Recording memory history requires CUDA")


@pytest.mark.parametrize("replacement, why", [
    (None, "has no torch.cuda.memory._record_memory_history"),
    (_old_form, "takes no context, stacks, max_entries"),
    (_fails, "failed: RuntimeError: Recording memory history requires CUDA"),
])
def test_allocator_history_missing_or_changed_is_not_available(monkeypatch, replacement, why):
    if replacement is None:
        monkeypatch.delattr(torch.cuda.memory, "_record_memory_history")
    else:
        monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", replacement)
    problems = Problems()
    assert allocator_history.start(500, problems) is False
    (line,) = not_available(problems, "CUDA allocator history")
    assert why in line


def test_without_allocator_history_a_cuda_job_records_sites_by_watching_tensors(monkeypatch):
    monkeypatch.delattr(torch.cuda.memory, "_record_memory_history")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # a CUDA job, as far as it knows
    problems = Problems()
    recorder = sites.SiteRecorder(problems)
    recorder.request(2)
    recorder.step_end(1, [0.01], "cuda:0")
    assert recorder.on and recorder.cuda_device is None  # the tensor watch instead
    kept = []
    try:
        for step in (2, 3):
            kept.append(torch.ones(1024))
            recorder.step_end(step, [0.01], "cuda:0")
    finally:
        recorder.request(0, on=False)
        recorder.step_end(4, [0.01], "cuda:0")
    assert not recorder.on and not torch.overrides._get_current_function_mode_stack()
    assert recorder.recorded_steps == [2, 3]
    assert max(recorder.sites()[0].live_bytes) == 2 * 1024 * 4
    assert len(not_available(problems, "CUDA allocator history")) == 1


# -- the CUDA allocator's OOM observer -----------------------------------------------------------------

class Attach:
    def __init__(self, fail: bool = False):
        self.observers, self.fail = [], fail

    def __call__(self, observer):
        if self.fail:
            raise RuntimeError("no CUDA allocator")
        self.observers.append(observer)


def test_oom_observer_missing_is_not_available(monkeypatch):
    monkeypatch.delattr(torch._C, "_cuda_attach_out_of_memory_observer", raising=False)
    problems = Problems()
    assert oom_observer.attach(lambda *a: None, problems) is False
    (line,) = not_available(problems, "OOM observer")
    assert "has no torch._C._cuda_attach_out_of_memory_observer" in line


def test_oom_observer_that_cannot_attach_is_not_available(monkeypatch):
    monkeypatch.setattr(torch._C, "_cuda_attach_out_of_memory_observer", Attach(fail=True), raising=False)
    problems = Problems()
    assert oom_observer.attach(lambda *a: None, problems) is False
    assert "failed: RuntimeError: no CUDA allocator" in not_available(problems, "OOM observer")[0]


def test_the_oom_observer_never_raises_into_the_allocator(monkeypatch):
    attach = Attach()
    monkeypatch.setattr(torch._C, "_cuda_attach_out_of_memory_observer", attach, raising=False)
    problems, seen = Problems(), []

    def on_oom(device, requested, total, free):
        if requested < 0:
            raise ValueError("bad figures")
        seen.append((device, requested, total, free))

    assert oom_observer.attach(on_oom, problems) is True
    (observer,) = attach.observers
    observer(0, 1 << 30, 80 << 30, 1 << 20)  # as torch 2.11 calls it
    assert seen == [(0, 1 << 30, 80 << 30, 1 << 20)]
    observer(0, 1 << 30)  # a changed call: fewer arguments
    observer(0, 1.5, "80G", None)  # other types
    observer(0, -1, 0, 0)  # the probe's own observer fails
    assert len(seen) == 1
    lines = problems.lines()
    assert "OOM observer: not available: the allocator of torch" in lines[0]
    assert "called it with (int, int), not (device, requested, total, free)" in lines[0]
    assert "called it with (int, float, str, NoneType)" in lines[1]
    assert lines[2] == "OOM observer: ValueError: bad figures"


def test_oom_watch_on_a_cuda_job_without_the_observer_is_told_once(monkeypatch):
    monkeypatch.delattr(torch._C, "_cuda_attach_out_of_memory_observer", raising=False)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    watch = OomWatch(Board())
    for _ in range(3):
        watch.attach_cuda_observer()
    assert watch.observer_attached is False and watch.observer_unavailable is True
    assert len(not_available(watch.problems, "OOM observer")) == 1


def test_oom_watch_waits_for_cuda_before_attaching(monkeypatch):
    attach = Attach()
    monkeypatch.setattr(torch._C, "_cuda_attach_out_of_memory_observer", attach, raising=False)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    watch = OomWatch(Board())
    watch.attach_cuda_observer()
    assert attach.observers == [] and not watch.observer_unavailable
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    watch.attach_cuda_observer()
    watch.attach_cuda_observer()
    assert len(attach.observers) == 1 and watch.observer_attached
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda device: {
        "allocated_bytes.all.current": 70 << 30, "reserved_bytes.all.current": 79 << 30})
    attach.observers[0](0, 2 << 30, 80 << 30, 1 << 20)
    last = watch.last
    assert (last.device, last.requested, last.free, last.allocated) == ("cuda:0", 2 << 30, 1 << 20, 70 << 30)
    assert watch.problems.lines() == ()


# -- torch.compile's wrapper ----------------------------------------------------------------------------

def test_torch_compile_wrapper_class_missing_is_not_available(monkeypatch):
    import torch._dynamo

    monkeypatch.delattr(torch._dynamo, "OptimizedModule")
    problems = Problems()
    assert compiled.is_compiled_wrapper(torch.nn.Linear(2, 2), problems) is False
    assert compiled.is_compiled_wrapper(torch.nn.Linear(2, 2), problems) is False
    (line,) = not_available(problems, "torch.compile")
    assert "has no torch._dynamo.OptimizedModule" in line


def test_torch_compile_wrapper_without_its_model_is_not_available():
    problems = Problems()
    assert compiled.original(object(), problems) is None
    assert "has no _orig_mod" in not_available(problems, "torch.compile")[0]
    model = torch.nn.Linear(2, 2)
    assert compiled.original(torch.compile(model), problems) is model


# -- the backward-pass check (reentrant checkpointing's recomputation) -------------------------------------

def test_the_backward_pass_check_sees_a_backward_pass_running():
    problems = Problems()
    check = backward_pass.BackwardPass(problems)
    seen = []
    x = torch.ones(2, requires_grad=True)
    y = x * 2
    y.register_hook(lambda grad: seen.append(check.running()))
    y.sum().backward()
    assert (seen, check.running(), problems.lines()) == ([True], False, ())


@pytest.mark.parametrize("replacement, why", [
    (None, "has no torch._C._current_graph_task_id"),
    (lambda: "task", "answered a str, not an int"),
    (lambda flag: -1, "raised TypeError"),
])
def test_the_backward_pass_check_missing_or_changed_is_not_available(monkeypatch, replacement, why):
    if replacement is None:
        monkeypatch.delattr(torch._C, "_current_graph_task_id")
    else:
        monkeypatch.setattr(torch._C, "_current_graph_task_id", replacement)
    problems = Problems()
    check = backward_pass.BackwardPass(problems)
    assert check.running() is False  # a module called in backward is taken for a forward pass, as before
    (line,) = not_available(problems, "backward-pass check")
    assert why in line and "reentrant checkpointing" in line


# -- all of them missing at once ------------------------------------------------------------------------

def test_the_probe_in_a_training_loop_with_every_private_function_missing(monkeypatch):
    import torch._dynamo

    monkeypatch.delattr(_AUTOGRAD, _TOP)
    monkeypatch.delattr(torch.cuda.memory, "_record_memory_history")
    monkeypatch.delattr(torch._C, "_cuda_attach_out_of_memory_observer", raising=False)
    monkeypatch.delattr(torch._dynamo, "OptimizedModule")
    monkeypatch.delattr(torch._C, "_current_graph_task_id")
    job = loops.make_job()
    probe = runtime.start(serve=False)
    loops.clean(job, 3)
    probe.desk.record_sites({"steps": 3})
    loops.leak_cache(job, 6)
    report = probe.report()
    assert len(report.steps) == 9 and len(report.recorded_steps) == 3 and report.sites
    assert report.limits == (LIMIT_HOOKS_UNAVAILABLE,)
    assert any("saved-tensor hooks: not available" in line for line in report.problems)
    assert any("backward-pass check: not available" in line for line in report.problems)
