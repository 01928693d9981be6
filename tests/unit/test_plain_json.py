"""The JSON documents: envelope, schema (checked by a small validator here and by jsonschema where
installed), every field's meaning written once in the model, and docs/json-schema.md generated from it."""

import dataclasses
import json
import math
import tracemalloc
from pathlib import Path

import pytest
from plain_data import T, errors, judged_document, judged_probe_document, training_report, workstation

import gputui.link.protocol as protocol
import gputui.model as model
import gputui.plain.schema as schema_module
from gputui.model import Device, GpuProcess, Host, Snapshot, fielddoc
from gputui.plain.document import (
    dumps,
    probe_list_document,
)
from gputui.plain.schema import DEFS, SCHEMA
from gputui.sample.judge import judge_reports

DOCS = Path(__file__).parents[2] / "docs" / "json-schema.md"


def assert_valid(document):
    text = dumps(document)
    problems = errors(json.loads(text), SCHEMA)
    assert problems == []


# ------------------------------------------------------------------------------------ documents

def test_snapshot_document_envelope_and_body():
    doc = json.loads(dumps(judged_document(workstation())))
    assert (doc["schema"], doc["version"]) == ("gputui.snapshot", 1)
    assert isinstance(doc["gputui"], str)
    snap = doc["snapshot"]
    assert snap["taken_at"] == T
    dev = snap["devices"][0]
    assert dev["memory_total"] == 24 * (1 << 30) and dev["power_draw"] == 402.3
    assert dev["temperature"] == 71 and dev["gpu_util"] == 87
    assert snap["devices"][2]["temperature"] is None and snap["devices"][2]["fan_speed"] is None
    assert snap["devices"][1]["lost"] == "GPU is lost"
    assert snap["processes"][2]["state"] == "denied" and snap["processes"][2]["command"] == []
    assert snap["probes"][0]["devices"][0]["allocator"]["reserved"] == 9 * (1 << 30) + 512 * (1 << 20)
    assert snap["host"]["load_average"] == [3.2, 2.5, 1.1]


def test_documents_satisfy_the_schema():
    assert_valid(judged_document(workstation()))
    assert_valid(judged_document(Snapshot(taken_at=0.0)))
    assert_valid(judged_probe_document(training_report()))
    report = training_report()
    assert_valid(probe_list_document([report], {12: "the probe has gone away"}, (), judge_reports([report])))
    assert_valid(probe_list_document([], {}, (), judge_reports([])))


def test_output_is_one_ascii_line():
    snap = workstation()
    accented = dataclasses.replace(snap.processes[0], command=("python", "résumé.py"))
    text = dumps(judged_document(dataclasses.replace(snap, processes=(accented,))))
    assert "\n" not in text
    text.encode("ascii")
    assert json.loads(text)["snapshot"]["processes"][0]["command"][1] == "résumé.py"


def test_nan_readings_become_null_not_invalid_json():
    doc = judged_document(Snapshot(taken_at=1.0, host=Host(cpu_percent=math.nan),
                                     devices=(Device(index=0, power_draw=math.inf),)))
    parsed = json.loads(dumps(doc))
    assert parsed["snapshot"]["host"]["cpu_percent"] is None
    assert parsed["snapshot"]["devices"][0]["power_draw"] is None


def test_documents_and_the_probe_wire_write_json_alike():
    # One writer (model.codec.dump_json): a reading that is NaN inside a tuple is null in a document
    # too, as it always was on the probe's wire.
    value = {"step": (1.5, math.nan), "peak": [math.inf, {"x": -math.inf}]}
    assert dumps(value) == '{"step":[1.5,null],"peak":[null,{"x":null}]}'
    assert protocol.dumps(value) == dumps(value).encode()


# ------------------------------------------------------------------------------------ the validator bites

@pytest.mark.parametrize("change, complaint", [
    (lambda d: d["snapshot"]["devices"][0].update(memory_used="12 GiB"), "memory_used"),
    (lambda d: d["snapshot"]["devices"][0].pop("temperature"), "missing temperature"),
    (lambda d: d["snapshot"]["devices"][0].update(vram=1), "unexpected vram"),
    (lambda d: d.update(version=2), "version"),
    (lambda d: d["snapshot"]["processes"][0].update(state="sleeping"), "state"),
    (lambda d: d["snapshot"]["host"].update(load_average=[1.0, 2.0]), "fewer than 3"),
    (lambda d: d["snapshot"]["devices"][0].update(gpu_util=-1), "-1 < 0"),
    (lambda d: d["snapshot"]["devices"][0].update(performance_state=32), "32 > 15"),
    (lambda d: d["snapshot"]["probes"][0].update(last_oom={"at": 1.0}), "missing message"),
    (lambda d: d["snapshot"]["devices"][0].update(index=True), "index"),
])
def test_schema_rejects_wrong_documents(change, complaint):
    doc = json.loads(dumps(judged_document(workstation())))
    change(doc)
    problems = errors(doc, SCHEMA)
    assert problems and any(complaint in p for p in problems), problems


# ------------------------------------------------------------------------------------ one place per field
# The schema's properties are the dataclasses' fields by construction (gputui/plain/schema.py reads them);
# what can still go wrong is a field without a meaning, a keyword with a typo, or stale docs.

SCHEMA_TYPES = schema_module.model_types()

# The JSON Schema keywords a field's doc() may carry; anything else is most likely a typo that jsonschema
# would silently ignore.
KEYWORDS = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "enum", "const", "pattern",
            "minLength", "maxLength", "minItems", "maxItems"}


def test_every_model_type_in_a_document_has_a_schema():
    assert set(DEFS) == {cls.__name__ for cls in SCHEMA_TYPES} == {
        "Driver", "MigInstance", "Device", "GpuProcess", "Owner", "ContainerOwner", "PodOwner", "SlurmOwner",
        "HostProcess", "Host", "MemoryCategories",
        "AllocatorStats", "ProbeDevice", "StepRecord", "OomRecord", "AllocationSite", "LeakKeeper",
        "ProbeReport", "Snapshot", "EndedProcess", "MonitorCost", "Breakdown", "BreakdownItem", "Placement",
        "Job", "JobRank", "JobDevice", "Estimate", "PhaseMemory", "PhasePeak", "WhatIf", "Headroom",
        # the judgements (gputui/sample/judge.py)
        "Judgements", "ProcessJudgement", "DeviceTrend", "ProcessTrend", "LeakVerdict", "CategoryGrowth",
        "GrowingSite", "Advice", "JobAnalysis", "Slot", "Imbalance", "Straggler", "FirstOom", "ShardedModel",
        "Waste", "WasteRules", "OwnerUse", "IdleGpu"}


@pytest.mark.parametrize("cls", SCHEMA_TYPES, ids=lambda cls: cls.__name__)
def test_every_field_says_what_it_means(cls):
    for f in dataclasses.fields(cls):
        assert fielddoc.DOC in f.metadata, f"{cls.__name__}.{f.name}: no metadata=doc(...): say what it means"
        meaning, keywords = f.metadata[fielddoc.DOC]
        assert isinstance(meaning, str) and meaning.strip(), f"{cls.__name__}.{f.name}: empty meaning"
        assert set(keywords) <= KEYWORDS, f"{cls.__name__}.{f.name}: unknown keywords {set(keywords) - KEYWORDS}"
        words = keywords.get("enum", ())
        named = [word for word in words if f"`{word}`" in meaning]
        assert not named or len(named) == len(words), (
            f"{cls.__name__}.{f.name}: the meaning names some of its words but not {set(words) - set(named)}")


def test_a_fields_doc_is_one_small_object_in_every_monitor():
    """Every monitor holds the model's 430 fields' docs: about 50 bytes each, not a dict, a tuple and a dict of
    keywords (about 300; 80 KB of the monitor's resident memory, issue 31 item 21). It reads as before."""
    meanings = [f"meaning {i}" for i in range(1000)]
    docs: list = [None] * len(meanings)
    tracemalloc.start()
    try:
        for i, meaning in enumerate(meanings):
            docs[i] = fielddoc.doc(meaning)
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert held / len(docs) < 64
    assert docs[7][fielddoc.DOC] == ("meaning 7", {}) and dict(docs[7]) == {fielddoc.DOC: ("meaning 7", {})}
    assert fielddoc.doc("bytes", minimum=0)[fielddoc.DOC] == ("bytes", {"minimum": 0})
    assert "other" not in docs[0] and len(docs[0]) == 1


def test_a_field_without_a_meaning_stops_the_schema():
    @dataclasses.dataclass(frozen=True)
    class Bare:
        """A type someone forgot to describe."""

        size: int = dataclasses.field(default=0, metadata=fielddoc.doc("bytes", minimum=0))
        count: int = 0

    with pytest.raises(LookupError, match="'count'"):
        schema_module.object_schema(Bare)


def test_docs_tables_are_generated_from_the_model():
    text = DOCS.read_text(encoding="utf-8")
    assert sorted(schema_module.documented_types(text)) == sorted(DEFS), (
        "docs/json-schema.md needs one '<!-- fields: NAME -->' table per schema type")
    assert text == schema_module.update_docs(text), (
        f"docs/json-schema.md is out of date with the model's field metadata: run {schema_module.DOCS_COMMAND}")


def test_docs_command_rewrites_only_the_tables(tmp_path, capsys):
    text = DOCS.read_text(encoding="utf-8")
    stale = text.replace("| `memory_total` | integer or null | total memory (bytes) |", "| `vram` | ? | ? |")
    assert stale != text
    path = tmp_path / "json-schema.md"
    path.write_text(stale, encoding="utf-8")
    assert schema_module.main(["--docs", str(path)]) == 0
    assert path.read_text(encoding="utf-8") == text
    assert schema_module.main(["--docs", str(path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith("up to date")


def test_docs_tables_read_the_types():
    text = DOCS.read_text(encoding="utf-8")
    assert "| `load_average` | list of 3 numbers or null | 1, 5 and 15 minute load averages |" in text
    assert "| `monitor` | [MonitorCost](#monitorcost) or null |" in text
    assert "| `mig_instances` | list of [MigInstance](#miginstance) |" in text
    assert "`compute_mode` | string or null | compute mode. Values: `default`, `exclusive_thread`," in text


def test_schema_is_valid_for_jsonschema_too():
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    validator = jsonschema.Draft202012Validator(SCHEMA)
    validator.validate(json.loads(dumps(judged_document(workstation()))))
    validator.validate(json.loads(dumps(judged_probe_document(training_report()))))
    bad = json.loads(dumps(judged_document(workstation())))
    bad["snapshot"]["devices"][0]["memory_used"] = "lots"
    assert not validator.is_valid(bad)


def test_schema_module_prints_the_schema():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "gputui.plain.schema"], capture_output=True, text=True,
                         timeout=60, check=True)
    assert json.loads(out.stdout) == json.loads(json.dumps(SCHEMA))


def test_gpu_process_kinds_in_schema_match_the_model_words():
    assert set(DEFS["GpuProcess"]["properties"]["state"]["enum"]) == {
        model.PROCESS_OK, model.PROCESS_GONE, model.PROCESS_DENIED, model.PROCESS_ZOMBIE,
        model.PROCESS_UNMAPPED} == set(model.PROCESS_STATES)
    assert DEFS["Device"]["properties"]["throttle_reasons"]["items"]["enum"] == list(model.THROTTLE_REASONS)
    assert DEFS["Device"]["properties"]["compute_mode"]["enum"][:-1] == list(model.COMPUTE_MODES)
    assert GpuProcess(pid=1, device_index=0).kind in DEFS["GpuProcess"]["properties"]["kind"]["enum"]


# ------------------------------------------------------------------------------------ one source

def test_the_hosts_schema_is_hostview_as_the_model_documents_it():
    from gputui.plain.document import HOST_FIELDS

    hosts = next(d for d in SCHEMA["oneOf"] if d.get("properties", {}).get("schema", {}).get("const") == "gputui.hosts")
    host = hosts["properties"]["hosts"]["items"]
    fields = {f.name: f for f in dataclasses.fields(model.HostView)}
    for name in HOST_FIELDS:  # each field's words written once, beside the field
        assert host["properties"][name]["description"] == fields[name].metadata[fielddoc.DOC][0]
    assert host["properties"]["state"]["enum"] == list(model.HOST_STATES)
    assert host["required"] == [*HOST_FIELDS, "document"]


def test_the_envelopes_are_the_documents_own():
    from gputui.plain import document

    envelopes = [SCHEMA["$defs"]["SnapshotDocument"], *SCHEMA["oneOf"][1:]]
    assert [e["properties"]["schema"]["const"] for e in envelopes] == list(document.KINDS)
    assert {e["properties"]["version"]["const"] for e in envelopes} == {document.VERSION}
