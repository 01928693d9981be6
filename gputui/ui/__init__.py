"""The live monitor: a Textual app showing devices, processes and their history.

The only package that imports Textual. It never imports torch and never samples the machine itself:
a worker calls the collector and hands immutable Snapshots to the widgets.
"""
