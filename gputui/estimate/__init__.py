"""``gputui estimate``: will a training job fit a device, measured before it runs.

Imports torch: only ``gputui estimate`` loads this package, in its own process, never the monitor.
"""
