"""gputui: a terminal monitor for NVIDIA GPUs that can explain a PyTorch job's memory."""

__version__ = "0.1.0"
