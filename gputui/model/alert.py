"""An alert: something about the machine that someone should hear of now (a leak confirmed, an OOM
coming, a GPU lost...), made by gputui/alerts/rules.py from a sample's judgements, with the events that
start and end it; and what alerts are asked for (the config's [alerts] and the --alert-* flags, which
gputui/alerts/settings.py checks). Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

from gputui.model.fielddoc import doc
from gputui.model.record import Record

# Alert.kind values
AlertKind = Literal["leak", "oom_soon", "oom_ended", "gpu_lost", "gpu_errors", "gpu_idle", "gpu_free",
                    "straggler", "imbalance"]
ALERT_KINDS: tuple[AlertKind, ...] = ("leak", "oom_soon", "oom_ended", "gpu_lost", "gpu_errors", "gpu_idle",
                                      "gpu_free", "straggler", "imbalance")
AlertSeverity = Literal["critical", "warning", "info"]
ALERT_SEVERITIES: tuple[AlertSeverity, ...] = ("critical", "warning", "info")
STARTED: Final = "started"
ENDED: Final = "ended"
AlertChange = Literal["started", "ended"]
TIMEOUT = 10.0  # seconds a command or a webhook may take
PER_MINUTE = 6  # deliveries a minute per channel
WEBHOOK_FORMATS = ("json", "slack", "ntfy")  # a webhook's body: gputui's JSON, Slack's, ntfy's


@dataclass(frozen=True, eq=False, repr=False)
class Alert(Record):
    """One alert while it lasts: what it is about and the evidence, in words and in fields."""

    kind: AlertKind = field(metadata=doc("what is wrong", enum=ALERT_KINDS))
    key: str = field(metadata=doc(
        'what it is about, stable while it lasts: `"gpu GPU-..."`, `"pid 4242@1700000000.0"`, `"job launcher 42"`'))
    severity: AlertSeverity = field(metadata=doc("how urgent", enum=ALERT_SEVERITIES))
    title: str = field(metadata=doc("one line for people"))
    detail: str = field(default="", metadata=doc("the evidence, with numbers"))
    pid: int | None = field(default=None, metadata=doc("the process it is about", minimum=1))
    gpu: str | None = field(default=None, metadata=doc("the GPU it is about (UUID, else NVML index)"))
    job: str | None = field(default=None, metadata=doc("the job it is about (its key)"))
    seconds_to_oom: float | None = field(default=None, metadata=doc("`oom_soon`: seconds until memory runs out",
                                                                     minimum=0))
    report_file: str | None = field(default=None, metadata=doc("`oom_ended`: the OOM report the probe left"))


@dataclass(frozen=True, eq=False, repr=False)
class AlertEvent(Record):
    """An alert starting or ending, at the time of the sample that showed it."""

    change: AlertChange = field(metadata=doc("whether it started or ended", enum=(STARTED, ENDED)))
    alert: Alert = field(metadata=doc("the alert (as last seen, for an ending)"))
    at: float = field(metadata=doc("the sample's time (seconds since the epoch)"))


@dataclass(frozen=True, eq=False, repr=False)
class Thresholds(Record):
    """When a finding is worth an alert; the defaults are README's."""

    oom_within: float = 30 * 60.0  # seconds to OOM below which `oom_soon` fires
    idle_after: float = 60 * 60.0  # seconds a GPU holds memory while idle before `gpu_idle`
    idle_util: int = 0  # percent of GPU utilisation at most that counts as idle
    free_after: float = 60.0  # seconds a once-busy GPU has been free before `gpu_free`
    kinds: frozenset[AlertKind] = frozenset(ALERT_KINDS)  # the kinds asked for


@dataclass(frozen=True, eq=False, repr=False)
class AlertSettings(Record):
    """What alerts to raise and where to send them (gputui/alerts/settings.py reads them)."""

    enabled: bool = True
    thresholds: Thresholds = Thresholds()
    command: str | None = None
    webhook: str | None = None
    webhook_format: str = "json"
    per_minute: int = PER_MINUTE
    timeout: float = TIMEOUT
    bell: bool = True
    desktop: str = "auto"
    tmux_passthrough: bool = False
