"""No driver: opening the real collector says so in one paragraph (the CLI turns it into exit 2)."""

import ctypes
from types import SimpleNamespace

import pynvml
import pytest

from gputui.collect import NvmlUnavailable, open_collector
from gputui.collect.collector import Collector
from gputui.errors import UserError


def nvml_present() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(nvml_present(), reason="this machine has an NVIDIA driver")
def test_real_collector_without_a_driver():
    with pytest.raises(NvmlUnavailable) as caught:
        open_collector()
    error = caught.value
    assert isinstance(error, UserError) and error.exit_code == 2
    message = str(error)
    assert "\n" not in message
    assert message.startswith("cannot read the GPUs: the NVIDIA driver's NVML library "
                              "(libnvidia-ml.so.1) could not be loaded or initialised "
                              "(NVML said: NVML Shared Library Not Found).")
    assert message.endswith("Try `gputui --demo` to see simulated GPUs.")
    assert pynvml.nvmlLib is None  # nothing half-loaded left behind
    with pytest.raises(NvmlUnavailable):  # and asking again gives the same answer
        open_collector()


def test_driver_present_but_not_loaded():
    def refuse():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    fake = SimpleNamespace(nvmlInit=refuse, NVMLError=pynvml.NVMLError)
    with pytest.raises(NvmlUnavailable, match=r"\(NVML said: Driver Not Loaded\)"):
        Collector(fake, psutil=None, proc_root=None)


def test_unknown_demo_scenario_is_a_user_error():
    with pytest.raises(UserError, match="unknown demo scenario 'moon'; choose one of workstation, "):
        open_collector("moon")
    assert pynvml.nvmlLib is None
