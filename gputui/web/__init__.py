"""``gputui web``: the monitor in a browser, read-only, behind the exporter's login.

Each browser tab is a monitor process of its own, drawn by Textual's web driver and relayed over a websocket
by textual-serve's AppService (server.py); the page is ours (page.py: nothing fetched from elsewhere), the
client textual-serve's. session.py is that process: the live monitor, the many-host view or a replay, with no
key that acts on a process. run.py checks what was asked and serves until stopped. Only this package imports
aiohttp and textual-serve (the ``web`` extra), and only ``gputui web`` imports this package.
"""
