"""The change from one JSON document to the next, and back: consecutive snapshots differ in a few
figures, so a recording stores each one as its change from the one before.

A patch is ``{"=": value}`` (the new value), ``{"k": {key: patch}, "x": [gone keys]}`` for an object,
or ``{"n": length, "i": {index: patch}}`` for an array: changed items by index, the rest kept.
"""

from __future__ import annotations

import math
from typing import Any


def diff(old: Any, new: Any) -> Any:
    """The patch that turns ``old`` into ``new``; None where nothing changed."""
    if isinstance(old, dict) and isinstance(new, dict):
        changed = {key: patch for key, value in new.items()
                   if (patch := _item(old, key, value)) is not None}
        gone = [key for key in old if key not in new]
        if not changed and not gone:
            return None
        return {"k": changed, "x": gone} if gone else {"k": changed}
    if isinstance(old, list) and isinstance(new, list):
        items = {str(i): patch for i, value in enumerate(new)
                 if (patch := (diff(old[i], value) if i < len(old) else {"=": value})) is not None}
        if not items and len(old) == len(new):
            return None
        return {"n": len(new), "i": items}
    return None if _same(old, new) else {"=": new}


def _item(old: dict[str, Any], key: str, value: Any) -> Any:
    return diff(old[key], value) if key in old else {"=": value}


def _same(old: Any, new: Any) -> bool:
    """Equal as JSON: 1 is not 1.0, and 0.0 is not -0.0."""
    if type(old) is not type(new) or old != new:
        return False
    return not isinstance(old, float) or math.copysign(1.0, old) == math.copysign(1.0, new)


def patch(old: Any, change: Any) -> Any:
    """``old`` with ``change`` (a :func:`diff`) applied; ``old`` itself is left as it was."""
    if change is None:
        return old
    if "=" in change:
        return change["="]
    if "k" in change:
        new = {key: value for key, value in old.items() if key not in change.get("x", ())}
        for key, item in change["k"].items():
            new[key] = patch(old.get(key), item)
        return new
    items = [old[i] if i < len(old) else None for i in range(change["n"])]
    for index, item in change["i"].items():
        i = int(index)
        items[i] = patch(old[i], item) if i < len(old) else patch(None, item)
    return items
