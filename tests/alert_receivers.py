"""A command that records each alert delivery it gets (stdin and GPUTUI_ALERT_* values), and reading
what it recorded: for the delivery tests and the real-program ones alike."""

import json


def recording_receiver(folder):
    """A command that keeps each delivery's stdin and GPUTUI_ALERT_* values, one folder per delivery."""
    script = folder / "receiver.sh"
    lines = ["#!/bin/sh", f'd={folder}/got/$(ls {folder}/got | wc -l)', 'mkdir "$d"', 'cat > "$d/stdin"']
    lines += [f'printf %s "$GPUTUI_ALERT_{name}" > "$d/{name}"'
              for name in ("KIND", "CHANGE", "SEVERITY", "TITLE", "KEY", "COUNT")]
    script.write_text("\n".join(lines) + "\n")
    script.chmod(0o755)
    (folder / "got").mkdir()
    return script


def received(folder):
    """What the recording receiver got, in order: each delivery's variables and its JSON document."""
    got = []
    for n in range(len(list((folder / "got").iterdir()))):
        one = folder / "got" / str(n)
        variables = {p.name: p.read_text() for p in one.iterdir() if p.name != "stdin"}
        got.append((variables, json.loads((one / "stdin").read_text())))
    return got
