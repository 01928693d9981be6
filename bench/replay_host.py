"""A stand-in for ssh in bench_hosts.py: called as ssh would be (``-o BatchMode=yes -- HOST COMMAND``),
it replays a recorded ``gputui --demo ... --json --watch`` stream at the period the command asks for,
each document's time set to now, so many hosts can be simulated without running many monitors.

    GPUTUI_SSH="python bench/replay_host.py RECORDING" gputui --hosts h1,h2

With ``--flood`` first, it ignores the period and writes documents as fast as the monitor takes them:
a broken or hostile host, for bench_hosts.py --flood.
"""

from __future__ import annotations

import re
import sys
import time

TAKEN_AT = re.compile(rb'"taken_at":[0-9.eE+-]+')


def main() -> int:
    flood = sys.argv[1] == "--flood"
    recording, *ssh_args = sys.argv[2:] if flood else sys.argv[1:]
    period = 0.0 if flood else float(ssh_args[-1].split("--watch", 1)[1].split()[0])  # the command's --watch S
    lines = open(recording, "rb").read().splitlines()
    out = sys.stdout.buffer
    i = 0
    while True:
        # The snapshot's own time first: the monitor keeps history only of snapshots newer than the last.
        line = TAKEN_AT.sub(b'"taken_at":%.3f' % time.time(), lines[i % len(lines)], count=1)
        try:
            out.write(line + b"\n")
            out.flush()
        except BrokenPipeError:
            return 0
        i += 1
        if period:
            time.sleep(period)


if __name__ == "__main__":
    sys.exit(main())
