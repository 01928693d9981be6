"""Who "me" is for ``--user`` and the "mine" filter, even in a container without a passwd entry,
and whether the monitor runs as root.

psutil names a process whose uid has no passwd entry by the uid itself ("1000"); the current user
gets the same name so the filter still matches their processes.
"""

from __future__ import annotations

import getpass
import os


def current_user() -> str:
    """The login name, or the uid as text when the system cannot name it."""
    try:
        return getpass.getuser()
    except (KeyError, OSError, ImportError):  # KeyError before 3.13, OSError from 3.13 on
        return str(os.getuid())


def running_as_root() -> bool:
    """Whether gputui runs with root's rights (effective uid 0): its signals then reach every
    user's processes, so the monitor says so."""
    return hasattr(os, "geteuid") and os.geteuid() == 0
