"""Pure functions over the monitor's history and probe reports: trends, leak verdicts, forecasts, advice.

Nothing here imports textual, torch, psutil or pynvml.
"""
