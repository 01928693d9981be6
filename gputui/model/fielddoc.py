"""Each model field's meaning, unit and constraints, written once: in the field's metadata.

    memory_used: int | None = field(default=None, metadata=doc("used memory (bytes)", minimum=0))

The JSON Schema (``gputui.plain.schema``) and the field tables of docs/json-schema.md are generated
from it. The meaning is for people and may use Markdown backticks; the keywords are JSON Schema
keywords for the field's value (for a list field, ``enum``, ``minimum`` and ``maximum`` apply to each
item). ``enum`` takes the model's own tuple of words (THROTTLE_REASONS), so the words live in one place.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

DOC = "gputui.doc"  # the metadata key
_NONE: dict[str, Any] = {}  # the keywords of the many fields with none, shared (never changed: read only)


class _Doc(Mapping[str, Any]):
    """The metadata ``{DOC: (meaning, schema)}`` in one small object: the model's 430 fields each have one,
    and a dict (with a tuple and a dict of keywords) costs about three times as much in every monitor."""

    __slots__ = ("meaning", "schema")

    def __init__(self, meaning: str, schema: dict[str, Any]) -> None:
        self.meaning = meaning
        self.schema = schema

    def __getitem__(self, key: str) -> tuple[str, dict[str, Any]]:
        if key != DOC:
            raise KeyError(key)
        return self.meaning, self.schema

    def __iter__(self) -> Iterator[str]:
        return iter((DOC,))

    def __len__(self) -> int:
        return 1


def doc(meaning: str, **schema: Any) -> Mapping[str, Any]:
    """A field's metadata: what it means, with its unit, and JSON Schema keywords for its value."""
    return _Doc(meaning, schema or _NONE)
