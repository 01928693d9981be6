"""Who is wasting GPUs: each owner's GPU memory, its mean SM utilisation over a window, and the GPUs it
holds idle (memory held at or above a threshold, utilisation under one, for long enough without a break).

The sampling pipeline's Judge feeds every snapshot to one WasteJudge (gputui/sample/judge.py), and every
output shows what it says (model/waste.py). It keeps running figures per owner and GPU instead of reading
the History back: a sample then costs one pass over its processes, not one over the whole window.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from gputui.model import GpuProcess, Snapshot
from gputui.model.record import Record
from gputui.model.waste import IdleGpu, OwnerAcross, OwnerKind, OwnerUse, SmSource, Waste, WasteRules

# A GPU not watched for longer than this (a stopped monitor, a gap in a recording) starts its idle time and
# the watch again: nobody is called idle for a stretch nobody saw.
MAX_GAP = 300.0

Who = tuple[OwnerKind, str]  # an owner: its kind and what it groups by (model.Owner.key)
Key = tuple[OwnerKind, str, int]  # an owner on one GPU


@dataclass(frozen=True, eq=False, repr=False)
class Reading(Record):
    """What one owner holds and does on one GPU in one sample."""

    memory: int
    util: float | None  # its processes' SM utilisation; the GPU's where the driver has none for them
    pids: tuple[int, ...]
    name: str
    stood_in: bool = False  # util is the GPU's, standing in for its processes': every output marks it


# The window's utilisation is kept in this many buckets per owner and GPU, whatever the sampling interval:
# bounded memory at a thousand processes sampled ten times a second; the window's edge moves in 60ths.
BUCKETS = 60


@dataclass
class _Held:
    """Running figures of one owner on one GPU, across samples."""

    idle_since: float | None = None
    buckets: deque[list[float]] = field(default_factory=deque)  # [bucket number, sum, count], oldest first
    total: float = 0.0  # the buckets' sums and counts added up
    count: int = 0
    stood_in_at: float | None = None  # the number of the latest bucket a GPU's utilisation stood in in

    def add(self, now: float, util: float, window: float, stood_in: bool = False) -> None:
        width = window / BUCKETS
        number = now // width
        if stood_in:
            self.stood_in_at = number
        if self.buckets and self.buckets[-1][0] == number:
            self.buckets[-1][1] += util
            self.buckets[-1][2] += 1
        else:
            self.buckets.append([number, util, 1])
        self.total += util
        self.count += 1

    def trim(self, now: float, window: float) -> None:
        """Forget the buckets that ended before the window began."""
        width = window / BUCKETS
        while self.buckets and (self.buckets[0][0] + 1) * width <= now - window:
            _, dropped, count = self.buckets.popleft()
            self.total -= dropped
            self.count -= int(count)

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count else None

    @property
    def source(self) -> SmSource | None:
        """Whose utilisation the mean is: "gpu" while a stand-in is in it (it is then at most the mean)."""
        if not self.buckets:
            return None
        return "gpu" if self.stood_in_at is not None and self.stood_in_at >= self.buckets[0][0] else "processes"


def who_of(process: GpuProcess) -> tuple[Who, str]:
    """The owner a process is counted under, and the name it is shown by."""
    owner = process.owner
    if owner is None:
        return ("user", process.user or ""), process.user or ""
    kind, key = owner.key
    name = key
    if kind == "pod" and owner.pod is not None:
        name = owner.pod.label
    elif kind == "container" and owner.container is not None:
        name = owner.container.label  # its name, or the short id docker shows
    return (kind, key), name  # type: ignore[return-value]  # Owner.key's kinds are OwnerKind's


def readings(snapshot: Snapshot) -> dict[Key, Reading]:
    """Each owner's memory and utilisation on each GPU it has a process on."""
    gpu_util = {d.index: d.gpu_util for d in snapshot.devices}
    groups: dict[Key, list[GpuProcess]] = {}
    names: dict[Key, str] = {}
    for process in snapshot.processes:
        (kind, key), name = who_of(process)
        at = (kind, key, process.device_index)
        groups.setdefault(at, []).append(process)
        names.setdefault(at, name)
    out = {}
    for at, processes in groups.items():
        sm = [p.sm_util for p in processes]
        # The driver leaves out a process that ran nothing since the last look, and some GPUs have no per-process
        # figures at all: the GPU's utilisation bounds its processes' from above, so it can only spare them.
        stood_in = None in sm
        util = gpu_util.get(at[2]) if stood_in else min(100, sum(s for s in sm if s is not None))
        out[at] = Reading(sum(p.gpu_memory or 0 for p in processes), None if util is None else float(util),
                          tuple(sorted({p.own_pid for p in processes})), names[at], stood_in)
    return out


class WasteJudge:
    """Judges the samples of one machine in order; one per sampling thread."""

    def __init__(self, rules: WasteRules | None = None) -> None:
        self.rules = rules = rules if rules is not None else WasteRules()
        self._held: dict[Key, _Held] = {}
        self._since: float | None = None  # the watch's start
        self._latest: float | None = None
        self._last = Waste(rules)

    def __call__(self, snapshot: Snapshot) -> Waste:
        now = snapshot.taken_at
        if self._latest is not None and now <= self._latest:
            return self._last  # the same instant twice (or a clock stepping back) must not count twice
        if self._latest is None or now - self._latest > MAX_GAP:
            self._since, self._held = now, {}
        self._latest = now
        now_held = readings(snapshot)
        self._held = {at: self._update(self._held.get(at) or _Held(), reading, now) for at, reading in now_held.items()}
        assert self._since is not None  # set above at the first sample
        self._last = Waste(self.rules, now - self._since, self._owners(now_held, now))
        return self._last

    def _update(self, held: _Held, reading: Reading, now: float) -> _Held:
        rules = self.rules
        idle = reading.memory >= rules.min_memory and reading.util is not None and reading.util < rules.max_util
        held.idle_since = (now if held.idle_since is None else held.idle_since) if idle else None
        if reading.util is not None:
            held.add(now, reading.util, rules.window, reading.stood_in)
        held.trim(now, rules.window)
        return held

    def _owners(self, now_held: dict[Key, Reading], now: float) -> tuple[OwnerUse, ...]:
        by_owner: dict[Who, list[Key]] = {}
        for at in now_held:
            by_owner.setdefault((at[0], at[1]), []).append(at)
        owners = [self._owner(who, sorted(keys, key=lambda at: at[2]), now_held, now) for who, keys in by_owner.items()]
        return tuple(sorted(owners, key=lambda o: (-len(o.idle), -o.memory, o.kind, o.name)))

    def _owner(self, who: Who, keys: list[Key], now_held: dict[Key, Reading], now: float) -> OwnerUse:
        means, sources, idle, idle_for = [], set(), [], 0.0
        for at in keys:
            held, reading = self._held[at], now_held[at]
            if held.mean is not None:
                means.append(held.mean)
                sources.add(held.source)
            if held.idle_since is not None:
                streak = now - held.idle_since
                idle_for = max(idle_for, streak)
                if streak >= self.rules.idle_after:
                    idle.append(IdleGpu(at[2], reading.memory, streak))
        return OwnerUse(
            kind=who[0], name=now_held[keys[0]].name,
            pids=tuple(sorted({pid for at in keys for pid in now_held[at].pids})),
            gpus=tuple(at[2] for at in keys), memory=sum(now_held[at].memory for at in keys),
            sm_util=sum(means) / len(means) if means else None, sm_source=_source(sources), idle_for=idle_for,
            idle=tuple(idle))


def _source(sources: set[SmSource | None]) -> SmSource | None:
    """Whose utilisation a mean of figures from ``sources`` is: the GPU's if any of them is (the mean is then
    an upper bound), the processes' if all are; None where none is known."""
    if "gpu" in sources:
        return "gpu"
    return "processes" if sources == {"processes"} else None


def across_hosts(views: Sequence[tuple[str, Waste]]) -> tuple[OwnerAcross, ...]:
    """Each owner over the hosts (host name, its own judgement): the many-host view's summary. The hosts
    judged by their own rules over what they watched; this only adds up what they said. Those holding
    the most idle GPUs first, then the most memory."""
    found: dict[tuple[str, str], list[tuple[str, OwnerUse]]] = {}
    for host, waste in views:
        for owner in waste.owners:
            found.setdefault((owner.kind, owner.name), []).append((host, owner))
    out = []
    for (_, name), held in found.items():
        owners = [o for _, o in held]
        weighed = [(o.sm_util, len(o.gpus)) for o in owners if o.sm_util is not None and o.gpus]
        gpus = sum(n for _, n in weighed)
        sources = {o.sm_source for o in owners if o.sm_util is not None and o.gpus}
        out.append(OwnerAcross(
            kind=owners[0].kind, name=name, hosts=tuple(sorted({host for host, _ in held})),
            gpus=sum(len(o.gpus) for o in owners), memory=sum(o.memory for o in owners),
            sm_util=sum(sm * n for sm, n in weighed) / gpus if gpus else None, sm_source=_source(sources),
            idle_gpus=sum(len(o.idle) for o in owners), idle_for=max(o.idle_for for o in owners)))
    return tuple(sorted(out, key=lambda o: (-o.idle_gpus, -o.memory, o.kind, o.name)))
