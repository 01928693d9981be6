"""The sampling pipeline: one machine's snapshots gathered (collector, probes, filters, jobs, OOM
endings) and judged (trends, leak verdicts, advice, job findings) once, as Samples for every output.

Below the outputs (plain, ui, serve, record, fleet), above collect, link and analysis; no Textual, no torch.
"""
