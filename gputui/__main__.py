"""``python -m gputui``: the same as the ``gputui`` command."""

import sys

from gputui.entry import main

sys.exit(main())
