"""What the exporter exposes, each metric with its labels, and how PromQL names them: the dashboard's
and the alert rules' tests check their queries against it."""

from __future__ import annotations

import re

from prometheus_client import ProcessCollector

from gputui.serve.metrics import FAMILIES

# Labels Prometheus adds to every series it scrapes.
TARGET_LABELS = {"instance", "job"}
METRIC = re.compile(r"\b((?:gputui|process)_[a-z_]+)\b(?:\s*\{([^}]*)\})?")
LABEL = re.compile(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)")


def exported() -> dict[str, set[str]]:
    """Each metric name the exporter exposes, with its labels."""
    names = {family.exposed: set(family.labels) for family in FAMILIES}
    own = ProcessCollector(registry=None, proc="/proc")  # the exporter's own cost, as registered in run.py
    names.update({sample.name: set(sample.labels) for metric in own.collect() for sample in metric.samples})
    return names
