"""Turn model dataclasses into plain JSON values and back.

One codec serves ``--json`` and the probe wire, so both speak the same field names. Decoding is
lenient by design: unknown keys are ignored and missing keys take their defaults, so a newer probe
and an older monitor (or the reverse) still understand each other.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from functools import cache
from typing import Any, Callable, TypeVar

T = TypeVar("T")


def parse_json(data: str | bytes | bytearray) -> Any:
    """JSON text from outside (a probe's socket, a host, a recording, a report file) as Python values.

    ValueError for anything that is not JSON, bytes that are not UTF-8 included, and for nesting
    deep enough to exhaust the parser's recursion (``[[[[...`` from a hostile peer): callers need
    one exception to catch, never a RecursionError that escapes as a traceback.
    """
    import json  # here: the live monitor without a probe never parses JSON (0.1 MB RSS; issue 31 item 21)

    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def dump_json(value: Any) -> str:
    """Compact ASCII JSON on one line, for every JSON gputui writes (documents, the probe wire, recordings).

    NaN and infinity are not JSON (jq and other readers reject them): a reading that came out that way
    is null.
    """
    import json  # here, as in parse_json: the live monitor without a probe writes no JSON

    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except ValueError:
        return json.dumps(_finite(value), separators=(",", ":"), allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def to_jsonable(value: Any) -> Any:
    """A dataclass tree as dicts, lists, strings, numbers, booleans and None."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    return value


def from_jsonable(cls: type[T], data: Any) -> T:
    """Rebuild a dataclass of type ``cls`` from :func:`to_jsonable` output.

    Raises ValueError when the data does not have the shape the type asks for.
    """
    tp: Any = cls  # (functools.cache types its argument Hashable, which a type[T] is not to mypy)
    decoded: T = _decoder(tp)(data, cls.__name__)
    return decoded


# Decoders are built once per type and cached: the monitor decodes every probe's report every
# refresh, so walking type hints on each call would cost more than the JSON parsing itself.
Decoder = Callable[[Any, str], Any]


@cache
def _decoder(tp: Any) -> Decoder:
    origin = typing.get_origin(tp)
    if origin is typing.Literal:  # a fixed set of words: decoded as leniently as any string of them
        return _exact_decoder(literal_type(tp))
    if origin in (typing.Union, types.UnionType):
        return _union_decoder(typing.get_args(tp))
    if origin is tuple:
        return _tuple_decoder(typing.get_args(tp))
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass_decoder(tp)
    if tp is float:
        return _decode_float
    if tp is int:
        return _decode_int
    if tp in (str, bool):
        return _exact_decoder(tp)
    if tp is Any:
        return lambda data, path: data
    raise TypeError(f"cannot decode type {tp!r}")


def literal_type(tp: Any) -> type:
    """The one type of a ``Literal[...]``'s values (``str`` for ``Literal["ok", "gone"]``)."""
    kinds = {type(a) for a in typing.get_args(tp)}
    if len(kinds) != 1:
        raise TypeError(f"only literals of one type are supported, not {tp!r}")
    return kinds.pop()


def _union_decoder(args: tuple[Any, ...]) -> Decoder:
    optional = type(None) in args
    options = [_decoder(a) for a in args if a is not type(None)]

    def decode(data: Any, path: str) -> Any:
        if data is None and optional:
            return None
        errors = []
        for option in options:
            try:
                return option(data, path)
            except ValueError as exc:
                errors.append(str(exc))
        raise ValueError(errors[0] if errors else f"{path}: unexpected null")

    return decode


def _tuple_decoder(args: tuple[Any, ...]) -> Decoder:
    if len(args) == 2 and args[1] is Ellipsis:
        item = _decoder(args[0])

        def decode_any_length(data: Any, path: str) -> tuple[Any, ...]:
            if not isinstance(data, list):
                raise ValueError(f"{path}: expected a list, got {type(data).__name__}")
            return tuple(item(v, f"{path}[{i}]") for i, v in enumerate(data))

        return decode_any_length
    items = [_decoder(a) for a in args]

    def decode_fixed(data: Any, path: str) -> tuple[Any, ...]:
        if not isinstance(data, list):
            raise ValueError(f"{path}: expected a list, got {type(data).__name__}")
        if len(items) != len(data):
            raise ValueError(f"{path}: expected {len(items)} items, got {len(data)}")
        return tuple(d(v, f"{path}[{i}]") for i, (d, v) in enumerate(zip(items, data)))

    return decode_fixed


def _dataclass_decoder(cls: type) -> Decoder:
    hints = typing.get_type_hints(cls)
    fields = []
    required = []
    for f in dataclasses.fields(cls):
        fields.append((f.name, hints[f.name]))
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
    decoders: list[tuple[str, Decoder]] = []

    def decode(data: Any, path: str) -> Any:
        if not decoders:  # built on first use: a dataclass may refer to itself
            decoders.extend((name, _decoder(tp)) for name, tp in fields)
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected an object, got {type(data).__name__}")
        for name in required:
            if name not in data:
                raise ValueError(f"{path}: missing field {name!r}")
        kwargs = {name: d(data[name], f"{path}.{name}") for name, d in decoders if name in data}
        return cls(**kwargs)

    return decode


def _decode_float(data: Any, path: str) -> float:
    if isinstance(data, (int, float)) and not isinstance(data, bool):
        return float(data)
    raise ValueError(f"{path}: expected a number, got {type(data).__name__}")


def _decode_int(data: Any, path: str) -> int:
    if isinstance(data, int) and not isinstance(data, bool):
        return data
    raise ValueError(f"{path}: expected an integer, got {type(data).__name__}")


def _exact_decoder(tp: type) -> Decoder:
    def decode(data: Any, path: str) -> Any:
        if isinstance(data, tp):
            return data
        raise ValueError(f"{path}: expected {tp.__name__}, got {type(data).__name__}")

    return decode
