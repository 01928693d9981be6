"""Recordings: what the monitor sees, sample after sample, in one compact file (``gputui record``),
read back for ``gputui replay`` and ``--once/--json --at``."""
