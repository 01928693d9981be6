"""Ways to start the probe in a training job, run from the monitor's side: ``gputui run`` and ``gputui attach``.

These commands run in gputui's own process, never inside the job, so they import neither torch nor
the probe: they hand the job an environment (``run``) or a script (``attach``) that imports
``gputui.probe.hook`` there, and watch for its socket with the monitor's client.
"""

from pathlib import Path

# The directory that holds the gputui package: put on the job's path so it imports this same gputui.
GPUTUI_HOME = str(Path(__file__).resolve().parents[2])
