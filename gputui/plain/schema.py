"""The JSON Schema (draft 2020-12) of the documents ``--json``, ``probe --json``, ``probes --json``,
``--hosts --json`` and ``estimate --json`` print.

Generated from the model: every dataclass field is a property, its type from the type hints and its
description and constraints from its metadata (``gputui.model.fielddoc.doc``), so each field's meaning
and unit are written once, beside the field. The field tables of docs/json-schema.md are generated from
the same metadata. ``python -m gputui.plain.schema`` prints the schema;
``python -m gputui.plain.schema --docs docs/json-schema.md`` rewrites the tables in that file.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

from gputui.model import Breakdown, Estimate, Headroom, HostView, ProbeReport, Snapshot
from gputui.model.codec import literal_type
from gputui.model.estimate import BACKWARD, CREATED, FORWARD, OPTIMIZER
from gputui.model.fielddoc import DOC
from gputui.model.judgement import Judgements, ProcessJudgement
from gputui.plain import document

SCHEMA_ID = "https://gputui.invalid/schema/v1"  # an identifier, not a URL to fetch

# The documents' bodies hold these; every dataclass they reach gets a definition.
ROOTS = (Snapshot, ProbeReport, Breakdown, Estimate, Headroom, Judgements)

_SCALARS = {int: "integer", float: "number", str: "string", bool: "boolean"}
# Keywords of a list field's metadata that constrain each item rather than the list.
_ITEM_KEYWORDS = {"enum", "const", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "pattern"}


# ------------------------------------------------------------------------------------ the model, read

def fields_of(cls: type) -> list[tuple[dataclasses.Field, Any]]:
    """The dataclass's fields with their resolved types, in declaration order."""
    hints = typing.get_type_hints(cls)
    return [(f, hints[f.name]) for f in dataclasses.fields(cls)]


def field_doc(f: dataclasses.Field) -> tuple[str, dict[str, Any]]:
    """A field's meaning and its JSON Schema keywords. Raises LookupError when it has none."""
    try:
        return f.metadata[DOC]
    except KeyError:
        raise LookupError(f"field {f.name!r} has no doc() metadata: say what it means, with its unit") from None


def _split_optional(tp: Any) -> tuple[Any, bool]:
    """``X | None`` -> (X, True); anything else -> (tp, False)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"only X | None unions are supported, not {tp!r}")
        return args[0], len(args) != len(typing.get_args(tp))
    return tp, False


def _items(tp: Any) -> tuple[Any, int | None] | None:
    """A tuple type's item type and fixed length (None: any length); None for a type that is no tuple."""
    if typing.get_origin(tp) is not tuple:
        return None
    args = typing.get_args(tp)
    if len(args) == 2 and args[1] is Ellipsis:
        return args[0], None
    if not args or any(a != args[0] for a in args):
        raise TypeError(f"only tuple[X, ...] and tuples of one type are supported, not {tp!r}")
    return args[0], len(args)


def model_types(roots: tuple[type, ...] = ROOTS) -> list[type]:
    """Every dataclass the roots reach, each once, in the order first met."""
    found: list[type] = []

    def visit(tp: Any) -> None:
        tp, _ = _split_optional(tp)
        items = _items(tp)
        if items is not None:
            visit(items[0])
        elif isinstance(tp, type) and dataclasses.is_dataclass(tp) and tp not in found:
            found.append(tp)
            for _, hint in fields_of(tp):
                visit(hint)

    for root in roots:
        visit(root)
    return found


def type_description(cls: type) -> str:
    """The first sentence of the class's docstring, without its full stop."""
    paragraph = " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())
    sentence = re.match(r"(.+?)\.(?:\s|$)", paragraph)
    return sentence.group(1) if sentence else paragraph


# ------------------------------------------------------------------------------------ JSON Schema

def _plain(meaning: str) -> str:
    """The meaning as plain text: docs/json-schema.md shows the backticks, the schema does not."""
    return meaning.replace("`", "")


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/$defs/{name}"}


def _value(tp: Any, keywords: dict[str, Any]) -> dict[str, Any]:
    """The schema of a value of type ``tp`` (no null), with the metadata's keywords."""
    items = _items(tp)
    if items is not None:
        item_type, length = items
        for_items = {k: v for k, v in keywords.items() if k in _ITEM_KEYWORDS}
        spec: dict[str, Any] = {"type": "array", "items": _value(item_type, for_items)}
        if length is not None:
            spec.update(minItems=length, maxItems=length)
        spec.update((k, v) for k, v in keywords.items() if k not in _ITEM_KEYWORDS)
        return spec
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if keywords:
            raise TypeError(f"{tp.__name__}: a nested dataclass takes no keywords, got {sorted(keywords)}")
        return _ref(tp.__name__)
    tp = _scalar(tp, keywords)
    if tp not in _SCALARS:
        raise TypeError(f"no JSON type for {tp!r}")
    if "enum" in keywords:  # the words say the type
        return {**keywords, "enum": list(keywords["enum"])}
    return {"type": _SCALARS[tp], **keywords}


def _scalar(tp: Any, keywords: dict[str, Any] | None = None) -> Any:
    """A ``Literal[...]`` as the type of its values, which must be the metadata's enum where it has one."""
    if typing.get_origin(tp) is not typing.Literal:
        return tp
    if keywords is not None and list(keywords.get("enum", typing.get_args(tp))) != list(typing.get_args(tp)):
        raise TypeError(f"{tp!r}: its values differ from the metadata's enum {keywords['enum']!r}")
    return literal_type(tp)


def _nullable(spec: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in spec:
        return {"anyOf": [spec, {"type": "null"}]}
    if "enum" in spec:
        return {**spec, "enum": [*spec["enum"], None]}
    return {**spec, "type": [spec["type"], "null"]}


def property_schema(f: dataclasses.Field, hint: Any) -> dict[str, Any]:
    """The schema of one field: its type, its description and the keywords of its metadata."""
    meaning, keywords = field_doc(f)
    tp, optional = _split_optional(hint)
    spec = _value(tp, dict(keywords))
    if optional:
        spec = _nullable(spec)
    return {**spec, "description": _plain(meaning)}


def object_schema(cls: type) -> dict[str, Any]:
    """An object with exactly the dataclass's fields, every one present (null when not known)."""
    properties = {f.name: property_schema(f, hint) for f, hint in fields_of(cls)}
    return {
        "type": "object",
        "description": type_description(cls),
        "properties": properties,
        "required": sorted(properties),
        "additionalProperties": False,
    }


def _list(items: dict[str, Any], description: str) -> dict[str, Any]:
    return {"type": "array", "description": description, "items": items}


def _envelope(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    """A document of ``kind`` (one of document.KINDS): plain/document.py's envelope around ``body``."""
    if kind not in document.KINDS:
        raise ValueError(f"no document kind {kind!r}")
    return {
        "type": "object",
        "properties": {
            "schema": {"const": kind, "description": "what this document is"},
            "version": {"const": document.VERSION,
                        "description": "schema version; bumped when a field changes meaning"},
            "gputui": {"type": "string", "description": "gputui version that wrote it"},
            **body,
        },
        "required": ["schema", "version", "gputui", *body],
        "additionalProperties": False,
    }


DEFS: dict[str, Any] = {cls.__name__: object_schema(cls) for cls in model_types()}

BREAKDOWNS = _list(_ref("Breakdown"), "each probed process's memory on each device, explained")

# gputui.probes' unreachable probes are no model type: plain/document.py writes them.
UNREACHABLE = {
    "type": "object",
    "description": "A probe that did not answer",
    "properties": {
        "pid": {"type": "integer", "description": "PID of the probed process", "minimum": 1},
        "reason": {"type": "string", "description": "why its probe did not answer"},
    },
    "required": ["pid", "reason"],
    "additionalProperties": False,
}

SNAPSHOT_DOCUMENT = _envelope(document.SNAPSHOT, {
    "snapshot": _ref("Snapshot"), "breakdowns": BREAKDOWNS,
    "judgements": {**_ref("Judgements"), "description": (
        "what the monitor judged of the snapshot: memory trends, leak verdicts, advice, job findings "
        "(added in version 1; absent in documents of an older gputui)")}})
# Documents of an older gputui (a recording, a remote host) have no judgements.
SNAPSHOT_DOCUMENT["required"].remove("judgements")

# gputui replay FILE --json says which sample of the recording it printed: record/run.py writes it. The
# one field not always present: the documents --json printed live (and recorded) have none.
REPLAY = {
    "type": "object",
    "description": "Which sample of the recording this is (gputui replay --json only)",
    "properties": {
        "sample": {"type": "integer", "minimum": 1, "description": "the sample's number, counted from 1"},
        "samples": {"type": "integer", "minimum": 1, "description": "how many samples the recording holds"},
        "taken_at": {"type": "number", "description": "when the sample was taken (seconds since the epoch)"},
        "start": {"type": "number", "description": "when the recording's first sample was taken"},
        "end": {"type": "number", "description": "when the recording's last sample was taken"},
    },
    "required": ["sample", "samples", "taken_at", "start", "end"],
    "additionalProperties": False,
}
SNAPSHOT_DOCUMENT["properties"]["replay"] = REPLAY

# A host of the hosts document: its HostView's fields, as the model documents them, and its snapshot
# as its own document.
HOST = {
    "type": "object",
    "description": f"{type_description(HostView)} (gputui --hosts)",
    "properties": {
        **{f.name: property_schema(f, hint) for f, hint in fields_of(HostView) if f.name in document.HOST_FIELDS},
        "document": {"anyOf": [{"$ref": "#/$defs/SnapshotDocument"}, {"type": "null"}],
                     "description": "its latest snapshot, as its own gputui --json prints it; null before the first"},
    },
    "required": [*document.HOST_FIELDS, "document"],
    "additionalProperties": False,
}

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": SCHEMA_ID,
    "title": "gputui JSON output",
    "oneOf": [
        _ref("SnapshotDocument"),
        _envelope(document.PROBE_REPORT, {
            "report": _ref("ProbeReport"), "breakdowns": BREAKDOWNS,
            "headroom": _list(_ref("Headroom"), "room to grow on each GPU of the job, where NVML and the "
                              "allocator can be read (added in version 1)"),
            "judgement": {"anyOf": [_ref(ProcessJudgement.__name__), {"type": "null"}], "description": (
                "what the monitor judged of the process: its leak verdict, growing sites, keepers and "
                "advice (added in version 1)")}}),
        _envelope(document.PROBE_LIST, {
            "probes": _list(_ref("ProbeReport"), "reports of the reachable probes"),
            "unreachable": _list(UNREACHABLE, "probes found but not answering"),
            "jobs": _list(_ref("Job"), "the jobs the probed processes belong to (added in version 1)"),
            "judgements": {**_ref("Judgements"), "description": (
                "what the monitor judged of each probed process (its leak verdict, growing sites, keepers and "
                "advice, as gputui probe PID --json says them) and each job's findings; waste is null here "
                "(added in version 1)")},
        }),
        _envelope(document.HOSTS, {"hosts": _list(HOST, "the hosts, in the order they were named")}),
        _envelope(document.ESTIMATE, {
            "estimate": _ref("Estimate"),
            "fits": {"type": ["boolean", "null"],
                     "description": "the peak is within the device's usable memory; null: no device given"},
            "runs_out_in": {"enum": [CREATED, FORWARD, BACKWARD, OPTIMIZER, None],
                            "description": "the first phase, as they ran, to need more than the device has"},
        }),
    ],
    "$defs": {**DEFS, "SnapshotDocument": SNAPSHOT_DOCUMENT},
}


# ------------------------------------------------------------------------------------ Markdown

DOCS_COMMAND = "python -m gputui.plain.schema --docs docs/json-schema.md"

# A generated table sits between these lines in docs/json-schema.md; everything else there is prose.
_TABLE = re.compile(r"^(<!-- fields: (\w+) -->\n)(.*?)^(<!-- end of fields -->)$", re.M | re.S)


def _markdown_type(tp: Any) -> str:
    tp, optional = _split_optional(tp)
    items = _items(tp)
    if items is not None:
        item_type, length = items
        word = _markdown_type(item_type)
        text = f"list of {length} {word}s" if length is not None else f"list of {word}"
    elif isinstance(tp, type) and dataclasses.is_dataclass(tp):
        text = f"[{tp.__name__}](#{tp.__name__.lower()})"
    else:
        text = _SCALARS[_scalar(tp)]
    return f"{text} or null" if optional else text


def markdown_meaning(f: dataclasses.Field) -> str:
    """The field's meaning as docs/json-schema.md shows it: its words, named where it does not name them."""
    meaning, keywords = field_doc(f)
    words = keywords.get("enum")
    if words and not any(f"`{word}`" in meaning for word in words):
        meaning = f"{meaning.rstrip('.')}. Values: {', '.join(f'`{word}`' for word in words)}"
    return meaning.replace("|", "\\|")


def markdown_table(cls: type) -> str:
    """The field table of one model type."""
    rows = ["| field | type | meaning |", "|---|---|---|"]
    rows += [f"| `{f.name}` | {_markdown_type(hint)} | {markdown_meaning(f)} |" for f, hint in fields_of(cls)]
    return "\n".join(rows) + "\n"


def update_docs(text: str) -> str:
    """``text`` (docs/json-schema.md) with every generated table made from the model as it is now."""
    types_by_name = {cls.__name__: cls for cls in model_types()}

    def table(match: re.Match) -> str:
        name = match.group(2)
        if name not in types_by_name:
            raise ValueError(f"docs: no model type {name!r} in the JSON output")
        return f"{match.group(1)}{markdown_table(types_by_name[name])}{match.group(4)}"

    return _TABLE.sub(table, text)


def documented_types(text: str) -> list[str]:
    """The model types docs/json-schema.md has a generated table for, in its order."""
    return [match.group(2) for match in _TABLE.finditer(text)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gputui.plain.schema", description=__doc__.split("\n")[0])
    parser.add_argument("--docs", metavar="PATH", type=Path,
                        help="rewrite the generated field tables in this Markdown file (docs/json-schema.md)")
    args = parser.parse_args(argv)
    if args.docs is None:
        print(json.dumps(SCHEMA, indent=2))
        return 0
    old = args.docs.read_text(encoding="utf-8")
    new = update_docs(old)
    missing = [name for name in DEFS if name not in documented_types(new)]
    if missing:
        print(f"{args.docs}: no '<!-- fields: NAME -->' table for {', '.join(missing)}", file=sys.stderr)
        return 1
    if new != old:
        args.docs.write_text(new, encoding="utf-8")
    print(f"{args.docs}: {'updated' if new != old else 'up to date'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
