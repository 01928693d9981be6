"""CUDA_VISIBLE_DEVICES parsing: indices, GPU and MIG UUIDs, prefixes, and CUDA's stop-at-invalid rule."""

from gputui.collect.visible import is_visible, parse_visible_devices, with_cuda_indices
from gputui.model import Device, MigInstance

GPU0 = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"
GPU1 = "GPU-8932aa00-0000-4106-c12f-20bd9faed9f6"
GPU2 = "GPU-11111111-2222-3333-4444-555555555555"
MIG_A = "MIG-aaaa1111-0000-5000-8000-000000000001"
MIG_B = "MIG-aaaa2222-0000-5000-8000-000000000002"

DEVICES = (
    Device(index=0, uuid=GPU0),
    Device(index=1, uuid=GPU1),
    Device(index=2, uuid=GPU2, mig_enabled=True, mig_instances=(
        MigInstance(index=0, uuid=MIG_A, gpu_instance_id=1, compute_instance_id=0),
        MigInstance(index=1, uuid=MIG_B, gpu_instance_id=2, compute_instance_id=0),
    )),
)


def test_unset_shows_every_gpu_in_nvml_order():
    assert parse_visible_devices(None, DEVICES) == {0: 0, 1: 1, 2: 2}


def test_empty_hides_everything():
    assert parse_visible_devices("", DEVICES) == {}


def test_indices_reorder():
    assert parse_visible_devices("2,0", DEVICES) == {2: 0, 0: 1}
    assert parse_visible_devices(" 1 , 2 ", DEVICES) == {1: 0, 2: 1}


def test_invalid_entry_stops_the_list():
    assert parse_visible_devices("1,7,0", DEVICES) == {1: 0}
    assert parse_visible_devices("0,-1,1", DEVICES) == {0: 0}
    assert parse_visible_devices("-1", DEVICES) == {}
    assert parse_visible_devices("0,banana,1", DEVICES) == {0: 0}
    assert parse_visible_devices("0,,1", DEVICES) == {0: 0}


def test_repeated_entry_stops_the_list():
    assert parse_visible_devices("1,1,0", DEVICES) == {1: 0}
    assert parse_visible_devices(f"0,{GPU0}", DEVICES) == {0: 0}


def test_full_and_prefix_uuids():
    assert parse_visible_devices(f"{GPU2},{GPU0}", DEVICES) == {2: 0, 0: 1}
    assert parse_visible_devices("GPU-1111,GPU-8932f", DEVICES) == {2: 0, 0: 1}
    assert parse_visible_devices("gpu-8932F937", DEVICES) == {0: 0}  # case does not matter


def test_ambiguous_prefix_is_invalid():
    assert parse_visible_devices("GPU-1111,GPU-8932,0", DEVICES) == {2: 0}


def test_mig_uuids_and_prefixes():
    assert parse_visible_devices(f"{MIG_B},{MIG_A}", DEVICES) == {MIG_B: 0, MIG_A: 1}
    assert parse_visible_devices("MIG-aaaa2", DEVICES) == {MIG_B: 0}
    assert parse_visible_devices("MIG-aaaa,0", DEVICES) == {}  # ambiguous: stops at once


def test_old_mig_form():
    assert parse_visible_devices(f"MIG-{GPU2}/2/0", DEVICES) == {MIG_B: 0}
    assert parse_visible_devices(f"MIG-{GPU2}/9/0,1", DEVICES) == {}


def test_with_cuda_indices_sets_devices_and_instances():
    devices = with_cuda_indices(DEVICES, {"CUDA_VISIBLE_DEVICES": f"1,{MIG_B}"})
    assert [d.cuda_index for d in devices] == [None, 0, None]
    assert [m.cuda_index for m in devices[2].mig_instances] == [None, 1]
    assert [is_visible(d) for d in devices] == [False, True, True]


def test_with_cuda_indices_unset_environment():
    devices = with_cuda_indices(DEVICES, {})
    assert [d.cuda_index for d in devices] == [0, 1, 2]
    assert [m.cuda_index for m in devices[2].mig_instances] == [None, None]
