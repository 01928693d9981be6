"""The ``gputui`` command's entry point (and ``python -m gputui``'s).

Nothing is imported here before the handler is in place: loading the CLI's modules takes a fifth of a
second, and Ctrl-C pressed then (a command typed by mistake) must end gputui as quietly as at any later
moment, with the shell's usual 130 and no traceback.
"""

from __future__ import annotations


def main() -> int:
    try:
        from gputui.cli import main as run

        return run()
    except KeyboardInterrupt:
        return 130
