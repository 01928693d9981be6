"""One ``__eq__``, ``__hash__`` and ``__repr__`` for every record of the model, not three compiled per class.

``@dataclass(frozen=True)`` compiles an ``__eq__``, a ``__hash__`` and a ``__repr__`` of its own for each
class: about 4 KB per class, 0.17 MB of resident memory for the model's classes in every monitor (issue 31
item 21). A record is ``@dataclass(frozen=True, eq=False, repr=False)`` over :class:`Record`, whose three
mean what dataclass's do: equal when of the same class with equal fields, hashed by those fields, shown as
``Name(field=value, ...)``.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from operator import attrgetter
from typing import Any, Callable


class Record:
    """Equality, hash and repr from the fields of the frozen dataclass that derives from it."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        cls: Any = self.__class__  # Any: mypy takes a class whose instances define __hash__ for unhashable
        values = _compared(cls)
        return bool(values(self) == values(other))

    def __hash__(self) -> int:
        cls: Any = self.__class__
        return hash(_compared(cls)(self))

    def __repr__(self) -> str:
        cls: Any = self.__class__
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in _shown(cls))
        return f"{cls.__qualname__}({shown})"


@cache
def _compared(cls: type) -> Callable[[Any], tuple]:
    """The tuple of a record's values it is compared and hashed by: its fields with ``compare``."""
    names = [f.name for f in dataclasses.fields(cls) if f.compare]
    if len(names) >= 2:
        return attrgetter(*names)  # C, as quick as dataclass's own; a tuple from two names on
    return lambda record: tuple(getattr(record, name) for name in names)


@cache
def _shown(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls) if f.repr)
