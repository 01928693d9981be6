"""Each model field's meaning, unit and constraints, written once: in the field's metadata.

    memory_used: int | None = field(default=None, metadata=doc("used memory (bytes)", minimum=0))

The JSON Schema (``gputui.plain.schema``) and the field tables of docs/json-schema.md are generated
from it. The meaning is for people and may use Markdown backticks; the keywords are JSON Schema
keywords for the field's value (for a list field, ``enum``, ``minimum`` and ``maximum`` apply to each
item). ``enum`` takes the model's own tuple of words (THROTTLE_REASONS), so the words live in one place.
"""

from __future__ import annotations

from typing import Any

DOC = "gputui.doc"  # the metadata key


def doc(meaning: str, **schema: Any) -> dict[str, Any]:
    """A field's metadata: what it means, with its unit, and JSON Schema keywords for its value."""
    return {DOC: (meaning, schema)}
