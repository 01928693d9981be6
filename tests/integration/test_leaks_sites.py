"""Growing allocation sites from recorded per-step live bytes."""

from gputui.analysis.sites import growing_sites
from gputui.model import AllocationSite, ProbeReport

KIB = 1 << 10
MIB = 1 << 20


def site(where, live, stack=()):
    return AllocationSite(where=where, live_bytes=tuple(live), stack=stack)


def with_sites(*sites, steps=tuple(range(100, 108))):
    return ProbeReport(pid=1, taken_at=0.0, recorded_steps=steps, sites=sites)


def test_growing_sites_fastest_first_with_exact_growth():
    report = with_sites(
        site("train.py:42 in train_step", [k * 8 * KIB for k in range(8)], stack=("train.py:42 in train_step",)),
        site("train.py:57 in train_step", [MIB + k * MIB for k in range(8)]),
        site("model.py:10 in forward", [4 * MIB] * 8),  # flat
        site("model.py:12 in forward", [0, 8 * KIB] * 4),  # rises and falls every step
        site("data.py:5 in load", [k * MIB for k in range(7)] + [0]),  # grew, then all released
        site("train.py:60 in train_step", [0, 256, 256, 512, 512, 512, 512, 512]),  # tiny, then flat
        site("train.py:61 in train_step", [0, 0, 0, 0, 0, 0, 0, 256]),  # below the allocator's rounding
        site("model.py:20 in forward", [k * MIB for k in range(5)] + [4 * MIB] * 3),  # warm-up
    )
    found = growing_sites(report)
    assert [g.where for g in found] == ["train.py:57 in train_step", "train.py:42 in train_step"]
    first, second = found
    assert first.bytes_per_step == MIB and first.growth == 7 * MIB and first.live_bytes == 8 * MIB
    assert first.steps == 8
    assert second.bytes_per_step == 8 * KIB and second.stack == ("train.py:42 in train_step",)


def test_a_noisy_but_growing_site_counts():
    live = [0, 10, 9, 20, 30, 29, 40, 50]
    found = growing_sites(with_sites(site("a.py:1", [v * KIB for v in live])))
    assert len(found) == 1 and found[0].growth == 50 * KIB


def test_too_few_recorded_steps_or_no_recording():
    assert growing_sites(with_sites(site("a.py:1", [0, MIB]), steps=(1, 2))) == ()
    assert growing_sites(ProbeReport(pid=1, taken_at=0.0)) == ()


def test_a_site_first_seen_late_is_aligned_with_the_latest_steps():
    report = with_sites(site("late.py:3", [0, 2 * MIB, 4 * MIB, 6 * MIB]))
    (found,) = growing_sites(report)
    assert found.bytes_per_step == 2 * MIB and found.steps == 4
