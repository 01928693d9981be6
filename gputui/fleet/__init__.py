"""The many-host view's data: one connection per host (the user's own ssh running ``gputui --json
--watch`` there, or a ``gputui serve`` endpoint's /snapshot), each host's state, and the latest
snapshot of each. No Textual: ``--hosts --once`` and ``--hosts --json`` use it too.

A slow or dead host never stalls another: each has a thread of its own, and readers only ever take
the latest decoded snapshot of each host.
"""
