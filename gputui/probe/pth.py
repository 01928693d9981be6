"""The one-line ``.pth`` file that makes ``GPUTUI_PROBE=1 python train.py`` work, and how to install it.

Python runs ``import`` lines of ``*.pth`` files in site-packages at every start-up; this one costs a
dictionary lookup when GPUTUI_PROBE is unset and imports ``gputui.probe.hook`` (no torch) when set.
``BuildPy`` is a setuptools command that puts the file next to the packages in the wheel
(``[tool.setuptools.cmdclass] build_py = "gputui.probe.pth.BuildPy"``); setuptools is imported only
when the build asks for it.
"""

from __future__ import annotations

PTH_NAME = "gputui-probe.pth"
PTH_LINE = (
    "import os; os.environ.get('GPUTUI_PROBE', '').strip().lower() not in "
    "('', '0', 'false', 'no', 'off') and __import__('gputui.probe.hook')\n"
)


def write_pth(directory) -> str:
    """Write the .pth file into ``directory`` and return its path."""
    import os

    path = os.path.join(os.fspath(directory), PTH_NAME)
    with open(path, "w") as f:
        f.write(PTH_LINE)
    return path


def __getattr__(name: str):
    if name == "BuildPy":
        return _build_py_class()
    raise AttributeError(name)


def _build_py_class():
    from setuptools.command.build_py import build_py

    class BuildPy(build_py):
        """build_py that also puts gputui-probe.pth at the top of the build (and so of the wheel)."""

        def run(self):
            super().run()
            target = self.build_lib
            if getattr(self, "editable_mode", False):
                # An editable wheel is made of what setuptools puts in install_lib (its unpacked
                # wheel), not of build_lib: the .pth goes there to be installed all the same.
                target = getattr(self.distribution.get_command_obj("install"), "install_lib", None)
            if target:
                self.mkpath(target)
                write_pth(target)

        def get_outputs(self, include_bytecode=True):
            import os

            return list(super().get_outputs(include_bytecode)) + [
                os.path.join(self.build_lib, PTH_NAME)
            ]

    return BuildPy
