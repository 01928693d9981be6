"""The wire between a probe inside a PyTorch job and the monitor: paths, message format, server, client.

No textual, no torch, no psutil: the server runs inside training jobs and the client inside the monitor.
"""
