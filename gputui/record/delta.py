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
    """``old`` with ``change`` (a :func:`diff`) applied; ``old`` itself is left as it was.

    ValueError where ``change`` is not a patch of ``old``'s shape: a recording may come from anyone.
    """
    if change is None:
        return old
    if not isinstance(change, dict):
        raise ValueError("a change that is not an object")
    if "=" in change:
        return change["="]
    if "k" in change:
        return _patch_object(old, change["k"], change.get("x", []))
    return _patch_array(old, change.get("n"), change.get("i"))


def _patch_object(old: Any, changed: Any, gone: Any) -> dict[str, Any]:
    if not isinstance(old, dict) or not isinstance(changed, dict) or not isinstance(gone, list):
        raise ValueError("a change to an object that is not one")
    drop = {key for key in gone if isinstance(key, str)}  # (a set: the gone keys may be many)
    new = {key: value for key, value in old.items() if key not in drop}
    for key, item in changed.items():
        new[key] = patch(old.get(key), item)
    return new


def _patch_array(old: Any, length: Any, changed: Any) -> list[Any]:
    if not isinstance(old, list) or not isinstance(changed, dict) or type(length) is not int:
        raise ValueError("a change to an array that is not one")
    # Items past the old end are all in the change (diff writes each new one): so a few bytes cannot
    # ask for a billion items.
    if not 0 <= length <= len(old) + len(changed):
        raise ValueError(f"a change to an array of {len(old)} items that asks for {length}")
    items = old[:length] + [None] * (length - len(old))
    for index, item in changed.items():
        i = int(index) if index.isascii() and index.isdigit() else -1
        if not 0 <= i < length:
            raise ValueError(f"a change to item {index[:20]!r} of an array of {length}")
        items[i] = patch(old[i] if i < len(old) else None, item)
    return items
