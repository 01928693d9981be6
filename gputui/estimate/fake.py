"""FakeTensorMode, where the meta device is not enough: autocast (amp) applies to CPU or CUDA tensors
only, never to meta ones, so an amp step runs on fake CPU tensors (shapes, dtypes and a device, no
memory). ``torch._subclasses.fake_tensor`` is private: this module is the only place that uses it,
and says "not available" where this torch lacks it.
"""

from __future__ import annotations

from typing import Any

from gputui.errors import UserError


def fake_tensors() -> Any:
    """A FakeTensorMode to enter; UserError where this torch has none."""
    try:
        from torch._subclasses.fake_tensor import FakeTensorMode
    except ImportError:
        raise UserError("--precision amp needs torch's FakeTensorMode, not available in this torch") from None
    # allow_non_fake_inputs: tensors made before the mode (module-level constants in the user's file)
    return FakeTensorMode(allow_non_fake_inputs=True)
