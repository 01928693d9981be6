"""The shared vocabulary: immutability and the JSON codec that --json and the probe wire share."""

import dataclasses
import json
from pathlib import Path

import pytest

from gputui.model import (
    AllocatorStats,
    Device,
    GpuProcess,
    Host,
    MemoryCategories,
    MigInstance,
    ProbeDevice,
    ProbeReport,
    Snapshot,
    StepRecord,
    from_jsonable,
    to_jsonable,
)


def sample_snapshot() -> Snapshot:
    report = ProbeReport(
        pid=42, taken_at=10.5, torch_version="2.13.0",
        devices=(ProbeDevice("cuda:0", cuda_index=0, allocator=AllocatorStats(allocated=1024, reserved=2048),
                             categories=MemoryCategories(parameters=512, gradients=512)),),
        steps=(StepRecord(step=1, ended_at=10.0, allocated=1024),),
    )
    return Snapshot(
        taken_at=10.0,
        devices=(Device(index=0, memory_total=80 << 30, power_draw=312.5, throttle_reasons=("sw_power_cap",),
                        mig_instances=(MigInstance(index=0, profile="1g.10gb"),)),),
        processes=(GpuProcess(pid=42, device_index=0, gpu_memory=3 << 30, command=("python", "train.py")),),
        host=Host(hostname="box", load_average=(1.0, 0.5, 0.25)),
        probes=(report,),
    )


def test_round_trip_through_json_text():
    snap = sample_snapshot()
    assert from_jsonable(Snapshot, json.loads(json.dumps(to_jsonable(snap)))) == snap


def test_unsupported_fields_stay_null_not_zero():
    data = to_jsonable(Device(index=3))
    assert data["temperature"] is None and data["memory_used"] is None and data["index"] == 3


def test_decoder_ignores_unknown_keys_and_fills_defaults():
    dev = from_jsonable(Device, {"index": 1, "from_the_future": True})
    assert dev == Device(index=1)


@pytest.mark.parametrize("bad, message", [
    ({"index": "zero"}, "Device.index: expected an integer"),
    ({}, "missing field 'index'"),
    ({"index": 0, "throttle_reasons": "idle"}, "expected a list"),
    ({"index": 0, "lost": 5}, "expected str"),
    ({"index": True}, "expected an integer"),
])
def test_decoder_rejects_wrong_shapes(bad, message):
    with pytest.raises(ValueError, match=message):
        from_jsonable(Device, bad)


def test_floats_accept_integers():
    assert from_jsonable(Device, {"index": 0, "power_draw": 300}).power_draw == 300.0


def test_snapshots_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        sample_snapshot().taken_at = 0


def test_parse_json_refuses_deep_nesting_with_a_value_error():
    from gputui.model.codec import parse_json

    assert parse_json(b'{"a": [1, {"b": null}]}') == {"a": [1, {"b": None}]}
    with pytest.raises(ValueError, match="nested too deeply"):
        parse_json("[" * 200_000 + "]" * 200_000)
    with pytest.raises(ValueError):
        parse_json(b"\xff\xfe")


def test_every_record_shares_one_eq_hash_and_repr_with_dataclass_meaning():
    """The model's frozen dataclasses take __eq__, __hash__ and __repr__ from Record: none compiled per class
    (0.17 MB of the monitor's RSS, issue 31 item 21), each meaning what dataclass's did."""
    import importlib
    import pkgutil

    import gputui.model
    from gputui.model.gpu import Driver
    from gputui.model.record import Record

    records = []
    for info in pkgutil.iter_modules(gputui.model.__path__, "gputui.model."):
        module = importlib.import_module(info.name)
        records += [c for c in vars(module).values()
                    if isinstance(c, type) and dataclasses.is_dataclass(c) and c.__module__ == info.name]
    assert len(records) >= 40
    for cls in records:
        assert (cls.__eq__, cls.__hash__, cls.__repr__) == (Record.__eq__, Record.__hash__, Record.__repr__), cls
        assert cls.__dataclass_params__.frozen, cls

    driver = Driver("550.54.15", "12.4", None)
    assert driver == Driver("550.54.15", "12.4", None)
    assert hash(driver) == hash(Driver("550.54.15", "12.4", None)) == hash(("550.54.15", "12.4", None))
    assert driver != Driver("550.54.15", "12.4", "12.550.54.15")
    assert driver != ("550.54.15", "12.4", None)  # another class is never equal, as with dataclass
    assert repr(driver) == "Driver(driver_version='550.54.15', cuda_driver_version='12.4', nvml_version=None)"
    assert {driver: 1}[Driver("550.54.15", "12.4", None)] == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        driver.nvml_version = "x"  # type: ignore[misc]


# The monitor's and the exporter's own packages: their frozen dataclasses are Records too (about 4.5 KB less
# each, issue 31 item 21). Not Options: options.py sits beside the model in the lowest layer (pyproject's
# contracts), where siblings import nothing of each other; nor the simulator (collect.sim), which stands in
# for the driver in --demo and the tests.
MONITOR_PACKAGES = ("alerts", "analysis", "collect", "fleet", "link", "plain", "record", "sample", "serve", "ui")


def test_the_monitors_frozen_dataclasses_are_records_too():
    import importlib
    import pkgutil

    import gputui
    from gputui.model.record import Record

    plain = []
    for package in MONITOR_PACKAGES:
        path = [str(Path(gputui.__path__[0]) / package)]
        for info in pkgutil.walk_packages(path, f"gputui.{package}."):
            if info.name.startswith("gputui.collect.sim"):
                continue
            module = importlib.import_module(info.name)
            plain += [f"{info.name}.{name}" for name, c in vars(module).items()
                      if isinstance(c, type) and dataclasses.is_dataclass(c) and c.__module__ == info.name
                      and c.__dataclass_params__.frozen and not issubclass(c, Record)]
    assert plain == []
