"""Who is wasting GPUs, the data layer: synthetic histories at the thresholds' edges, a bursty process that
is never called idle, the shared Kubernetes node of --demo over simulated minutes, and the rules' checks."""

from __future__ import annotations

import pytest
from test_plain_golden import FakeClock

from gputui.analysis.waste import MAX_GAP, WasteJudge
from gputui.analysis.waste_rules import parse_waste_table, with_values
from gputui.model import Device, GpuProcess, Owner, PodOwner, Snapshot
from gputui.model.waste import IdleGpu, WasteRules
from gputui.options import Options
from gputui.sample.pipeline import open_pipeline

GiB = 1 << 30
T0 = 1_767_600_000.0
RULES = WasteRules(window=600.0, min_memory=GiB, max_util=5.0, idle_after=600.0)


def snap(t, *uses, gpu_util=None):
    """A snapshot at T0 + t: each use is (pid, device, memory, sm_util[, owner]); GPU utilisation per device."""
    gpu_util = gpu_util or {}
    devices = tuple(Device(i, gpu_util=gpu_util.get(i)) for i in sorted({u[1] for u in uses} | set(gpu_util)))
    processes = tuple(GpuProcess(pid=u[0], device_index=u[1], gpu_memory=u[2], sm_util=u[3], user="alice",
                                 owner=u[4] if len(u) > 4 else None) for u in uses)
    return Snapshot(taken_at=T0 + t, devices=devices, processes=processes)


def play(judge, times, use):
    """Judge ``use(t)`` at each of ``times``; the last judgement."""
    waste = None
    for t in times:
        waste = judge(snap(t, *use(t)))
    return waste


def test_idle_exactly_at_the_threshold_not_a_sample_before():
    judge = WasteJudge(RULES)
    held = lambda t: [(10, 0, 8 * GiB, 0)]  # noqa: E731
    before = play(judge, range(0, 600, 10), held)  # last sample at 590 s
    assert before.owners[0].idle == () and before.owners[0].idle_for == 590.0
    at = judge(snap(600, *held(600)))
    assert at.owners[0].idle == (IdleGpu(device=0, memory=8 * GiB, idle_for=600.0),)
    assert at.owners[0].kind == "user" and at.owners[0].name == "alice" and at.idle_gpus == 1


@pytest.mark.parametrize(("memory", "sm", "idle"), [
    (GiB, 4, True),  # at the memory threshold, under the utilisation one
    (GiB - 1, 0, False),  # a byte short of holding the GPU
    (8 * GiB, 5, False),  # at the utilisation threshold: not under it
])
def test_memory_and_utilisation_thresholds(memory, sm, idle):
    waste = play(WasteJudge(RULES), range(0, 660, 60), lambda t: [(10, 0, memory, sm)])
    assert bool(waste.owners[0].idle) is idle


def test_a_bursty_process_between_bursts_is_never_idle():
    # 8 GiB held for 30 minutes: 0 % for 9 minutes, then a 20 s burst at 90 %, over and over (an evaluation job)
    bursty = lambda t: [(10, 0, 8 * GiB, 90 if t % 560 >= 540 else 0)]  # noqa: E731
    judge = WasteJudge(RULES)
    longest = 0.0
    for t in range(0, 1800, 5):
        waste = judge(snap(t, *bursty(t)))
        assert waste.owners[0].idle == ()
        longest = max(longest, waste.owners[0].idle_for)
    assert longest == 535.0  # each quiet stretch is short of the 600 s
    assert waste.owners[0].sm_util == pytest.approx(90 * 4 / 112, abs=0.5)  # 4 burst samples in 112


def test_unknown_process_utilisation_on_a_busy_gpu_spares_it_on_an_idle_gpu_does_not():
    busy = play(WasteJudge(RULES), range(0, 700, 50), lambda t: [(10, 0, 8 * GiB, None)])
    assert busy.owners[0].sm_util is None and busy.owners[0].idle == ()  # nothing known: nobody accused
    judge = WasteJudge(RULES)
    for t in range(0, 700, 50):
        waste = judge(snap(t, (10, 0, 8 * GiB, None), (11, 1, 8 * GiB, None), gpu_util={0: 80, 1: 0}))
    by_pid = {o.pids: o for o in waste.owners}
    assert by_pid[(10, 11)].idle == (IdleGpu(1, 8 * GiB, 650.0),)  # one owner: GPU 1 idle, GPU 0 busy
    assert by_pid[(10, 11)].sm_util == 40.0


def test_a_gap_in_the_watch_starts_the_idle_time_again():
    judge = WasteJudge(RULES)
    held = lambda t: [(10, 0, 8 * GiB, 0)]  # noqa: E731
    play(judge, range(0, 500, 10), held)
    after = judge(snap(490 + MAX_GAP + 1, *held(0)))
    assert after.watched == 0.0 and after.owners[0].idle_for == 0.0


def test_the_same_instant_twice_counts_once():
    judge = WasteJudge(RULES)
    first = judge(snap(0, (10, 0, 8 * GiB, 0)))
    assert judge(snap(0, (10, 0, 8 * GiB, 100))) is first


def test_mean_utilisation_is_over_the_window_only():
    # 0 % for 20 minutes, then 100 % for the last 10: the 10-minute window's mean is 100 (to a 60th of it)
    waste = play(WasteJudge(RULES), range(0, 1800, 10), lambda t: [(10, 0, 8 * GiB, 0 if t < 1200 else 100)])
    assert waste.owners[0].sm_util == pytest.approx(100.0, abs=100 / 60)


def test_owners_group_by_pod_across_processes_and_gpus():
    pod = Owner(user="1002", pod=PodOwner(uid="u-1", namespace="ml", name="nb"))
    judge = WasteJudge(RULES)
    waste = play(judge, range(0, 610, 10), lambda t: [(20, 0, 2 * GiB, 0, pod), (21, 1, 3 * GiB, 0, pod),
                                                      (30, 2, 9 * GiB, 70)])
    nb, alice = waste.owners
    assert (nb.kind, nb.name, nb.pids, nb.gpus, nb.memory) == ("pod", "ml/nb", (20, 21), (0, 1), 5 * GiB)
    assert [g.device for g in nb.idle] == [0, 1] and nb.idle_for == 600.0
    assert (alice.kind, alice.name, alice.idle, alice.sm_util) == ("user", "alice", (), 70.0)


def test_the_idle_pod_of_the_demo_node_is_named_with_the_simulators_figures():
    clock = FakeClock()
    with open_pipeline(Options(mode="once", demo="shared-k8s"), clock=clock, pause=clock.advance,
                       environ={}) as pipeline:
        clock.advance(60)
        for _ in range(60):  # ten minutes, a sample every 10 s
            sample = pipeline.sample()
            clock.advance(10)
        short = sample.judgements.waste
        sample = pipeline.sample()  # 600 s after the first
    waste = sample.judgements.waste
    assert short is not None and short.idle_gpus == 0 and short.owners[1].idle_for == 590.0
    assert waste is not None and waste.watched == 600.0
    notebook = waste.owners[0]
    # the scenario's truth: the notebook pod holds 21 GiB on GPU 5 and 19 GiB on GPU 6 and runs nothing
    assert (notebook.kind, notebook.name, notebook.pids, notebook.gpus) == ("pod", "team-vision/notebook-sam",
                                                                             (83001,), (5, 6))
    assert notebook.idle == (IdleGpu(5, 21 * GiB, 600.0), IdleGpu(6, 19 * GiB, 600.0))
    assert notebook.memory == 40 * GiB and notebook.sm_util == 0.0
    assert [(o.name, o.idle) for o in waste.owners[1:]] == [("ml-research/llama-ft-0", ()),
                                                           ("inference/vllm-mistral-7d9f", ()),
                                                           ("batch/embed-nightly-x2k4p", ())]
    assert waste.owners[1].sm_util == pytest.approx(93.0, abs=2.0)  # the scenario's 93 % with its jitter


def test_rules_from_the_config_and_the_flags():
    def bad(key, why):
        return ValueError(f"{key} {why}")

    rules = parse_waste_table({"window": "5m", "idle_memory": "2GiB", "idle_util": 10, "idle_after": "1h"}, bad)
    assert rules == WasteRules(window=300.0, min_memory=2 * GiB, max_util=10.0, idle_after=3600.0)
    assert with_values(rules, {"idle_util": "2.5", "idle_memory": "512MiB"}, bad).max_util == 2.5
    for values, said in [({"idle_util": 0}, "idle_util must be a percentage above 0 and at most 100, not 0"),
                         ({"idle_util": True}, "idle_util must be a percentage"),
                         ({"idle_after": "soon"}, 'idle_after must be a duration such as "10m"'),
                         ({"window": "25h"}, 'window must be a duration such as "10m", "1h", "90s", up to 24.0 h'),
                         ({"idle_memory": -1}, 'idle_memory must be a size such as "1GiB"')]:
        with pytest.raises(ValueError, match="^" + said.replace("(", r"\(").replace(".", r"\.")):
            with_values(WasteRules(), values, bad)
    with pytest.raises(ValueError, match=r"^waste\.idle is not a setting \(known: window, idle_memory"):
        parse_waste_table({"idle": 3}, bad)


def test_across_hosts_adds_up_what_each_host_said():
    from gputui.analysis.waste import across_hosts
    from gputui.model.waste import OwnerUse, Waste

    rules = WasteRules()
    job_a = OwnerUse("slurm", "4242", pids=(10,), gpus=(0, 1, 2), memory=30 << 30, sm_util=90.0)
    job_b = OwnerUse("slurm", "4242", pids=(11,), gpus=(5,), memory=8 << 30, sm_util=2.0, idle_for=900.0,
                     idle=(IdleGpu(5, 8 << 30, 900.0),))
    bob = OwnerUse("user", "bob", pids=(12,), gpus=(3,), memory=2 << 30, sm_util=None, idle_for=30.0)
    owners = across_hosts([("a", Waste(rules, 700.0, (job_a, bob))), ("b", Waste(rules, 700.0, (job_b,)))])
    assert [(o.kind, o.name) for o in owners] == [("slurm", "4242"), ("user", "bob")]  # idle GPUs first
    job, user = owners
    assert (job.hosts, job.gpus, job.memory, job.idle_gpus, job.idle_for) == (("a", "b"), 4, 38 << 30, 1, 900.0)
    assert job.sm_util == pytest.approx((3 * 90.0 + 2.0) / 4)  # each GPU weighted alike
    assert (user.hosts, user.sm_util, user.idle_gpus, user.idle_for) == (("a",), None, 0, 30.0)
    assert across_hosts([]) == ()


# ------------------------------------------------------------------- the GPU's figure standing in (issue 47 item 6)

def test_a_gpus_utilisation_standing_in_is_marked_as_the_gpus():
    judge = WasteJudge(RULES)
    # bob's only process has no figure from the driver; carol's two add up to the GPU's 65 by chance
    for t in range(0, 60, 10):
        waste = judge(snap(t, (10, 1, 6 * GiB, None, Owner(user="bob")), (20, 1, 3 * GiB, 58, Owner(user="carol")),
                           (21, 1, GiB, 7, Owner(user="carol")), (30, 2, 2 * GiB, None, Owner(user="dan")),
                           gpu_util={1: 65}))
    by_name = {o.name: o for o in waste.owners}
    assert (by_name["bob"].sm_util, by_name["bob"].sm_source) == (65.0, "gpu")
    assert (by_name["carol"].sm_util, by_name["carol"].sm_source) == (65.0, "processes")
    assert (by_name["dan"].sm_util, by_name["dan"].sm_source) == (None, None)  # GPU 2's utilisation is unknown too


def snap_at(t, *uses, gpu_util):
    return Snapshot(taken_at=T0 + t, devices=tuple(Device(i, gpu_util=u) for i, u in gpu_util.items()),
                    processes=tuple(GpuProcess(pid=p, device_index=d, gpu_memory=m, sm_util=s, user="sam")
                                    for p, d, m, s in uses))


def test_one_process_without_a_figure_makes_the_owners_the_gpus():
    # sam on the leaky demo: one process at n/a, one at 6 %, the GPU at 92 %
    waste = WasteJudge(RULES)(snap_at(0, (52300, 0, 4 * GiB, None), (52410, 0, GiB, 6), gpu_util={0: 92}))
    assert (waste.owners[0].sm_util, waste.owners[0].sm_source) == (92.0, "gpu")


def test_the_mark_lasts_while_a_stand_in_is_in_the_window():
    judge = WasteJudge(RULES)
    judge(snap_at(0, (10, 0, 8 * GiB, None), gpu_util={0: 80}))  # one sample the driver left the process out of
    for t in range(10, 600, 10):
        waste = judge(snap_at(t, (10, 0, 8 * GiB, 20), gpu_util={0: 80}))
    assert waste.owners[0].sm_source == "gpu"  # 80 is still in the mean: it is at most the figure shown
    assert waste.owners[0].sm_util == pytest.approx((80 + 59 * 20) / 60)
    for t in range(600, 620, 10):
        waste = judge(snap_at(t, (10, 0, 8 * GiB, 20), gpu_util={0: 80}))
    assert (waste.owners[0].sm_util, waste.owners[0].sm_source) == (pytest.approx(20.0), "processes")


def test_the_workstation_demos_bob_reads_the_gpus_65():
    from test_plain_golden import sample_at

    waste = sample_at("workstation", 60).judgements.waste
    by_name = {o.name: (o.sm_util, o.sm_source) for o in waste.owners}
    assert by_name["bob"] == (65.0, "gpu")  # his ipykernel reads n/a; GPU 1 is at 65 %
    assert by_name["carol"] == (65.0, "processes")  # blender 58 % and ffmpeg 7 %: her own
    assert by_name["alice"] == (96.0, "processes")


def test_across_hosts_marks_an_owner_any_host_read_from_its_gpu():
    from gputui.analysis.waste import across_hosts
    from gputui.model.waste import OwnerUse, Waste

    rules = WasteRules()
    own = OwnerUse("user", "bob", pids=(10,), gpus=(0,), memory=GiB, sm_util=10.0, sm_source="processes")
    stood_in = OwnerUse("user", "bob", pids=(11,), gpus=(1,), memory=GiB, sm_util=70.0, sm_source="gpu")
    unknown = OwnerUse("user", "eve", pids=(12,), gpus=(1,), memory=GiB)
    both = across_hosts([("a", Waste(rules, 60.0, (own, unknown))), ("b", Waste(rules, 60.0, (stood_in,)))])
    assert [(o.name, o.sm_util, o.sm_source) for o in both] == [("bob", 40.0, "gpu"), ("eve", None, None)]
    alone = across_hosts([("a", Waste(rules, 60.0, (own,)))])
    assert (alone[0].sm_util, alone[0].sm_source) == (10.0, "processes")
