"""Sampling the machine: NVML and psutil in, an immutable gputui.model.Snapshot out.

``open_collector()`` reads the real driver, ``open_collector("training-node")`` simulated GPUs.
Never imports textual or torch.
"""

from gputui.collect.collector import Collector, open_collector
from gputui.collect.nvml import NvmlUnavailable

__all__ = ["Collector", "NvmlUnavailable", "open_collector"]
