"""Plain output for scripts, logs and quick looks: ``--once`` text, ``--json``, ``--watch``, and the
``probes``/``probe`` commands. Never imports textual or torch."""
