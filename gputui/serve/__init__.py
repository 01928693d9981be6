"""``gputui serve``: a Prometheus exporter, and the ``--json`` document over HTTP.

A thread samples the machine every few seconds (sampling.py); scrapes are answered from the last
sample (metrics.py: the metric families; web.py: what each path answers; server.py: the listening
socket, TLS and its threads; auth.py: basic auth's hashed passwords). run.py puts them together.
Never imports Textual or torch.
"""
