"""The monitor's widgets: header, device rows, history charts, process table, probe panel.

Each widget renders from the immutable Snapshot (or History) it is handed and never samples anything.
"""
