"""The config's [keys] remaps, checked against every key that works on the same screen, so a remap
that takes a key another action already has (``quit = "j"`` where ``j`` is the job view) is refused
with both named, instead of one of them going quiet.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from textual.binding import Binding

from gputui.config import Config, ConfigError, check_binding_ids
from gputui.ui.bindings import binding_ids, class_bindings, remapped
from gputui.untrusted import visible


def check_keymap(config: Config) -> None:
    """Refuse [keys] remaps that name no binding, or bind a key that another action uses on the same
    screen (one of gputui's, or one built into Textual that cannot be remapped)."""
    check_binding_ids(config, binding_ids())
    clash = first_clash(config.keys)
    if clash is not None:
        raise ConfigError(f"{visible(str(config.path or 'config'))}: [keys] {clash}")


def first_clash(keymap: Mapping[str, str]) -> str | None:
    """What is wrong with the first key that ``keymap`` gives to two actions on one screen, or None.
    Pairs that share a key by design (``q`` quits, but closes the help screen) may go on sharing one."""
    by_design = {(where, _pair(one, other)) for where, _, one, other in _shared_keys({})}
    for where, key, moved, other in _shared_keys(keymap):
        if (where, _pair(moved, other)) in by_design:
            continue
        if other.id is None:
            whose, fix = f"{_name(other)} (built into Textual, not remappable)", "choose another key"
        else:
            whose, fix = f"{_name(other)} (binding {other.id})", "give one of them another key"
        asked = visible(keymap.get(moved.id or "", ""))
        return f'{moved.id} = "{asked}": {key} is already {whose} on {where}; {fix}'
    return None


def key_scopes() -> list[tuple[str, list[Binding]]]:
    """The bindings that work together on each screen: the app's (replay's included), the screen's,
    its focused widget's, and those each class inherits from Textual."""
    from gputui.ui.app import GpuTuiApp
    from gputui.ui.main_screen import MainScreen
    from gputui.ui.screens.alerts import AlertsScreen
    from gputui.ui.screens.confirm import Confirm
    from gputui.ui.screens.detail import ProcessDetail
    from gputui.ui.screens.help import HelpScreen
    from gputui.ui.screens.job_detail import JobDetail
    from gputui.ui.screens.waste import WasteScreen
    from gputui.ui.widgets.processes import ProcessTable

    everywhere = class_bindings(GpuTuiApp)  # the monitor's app: its keys, the replay's too
    screens = [("the main screen", (MainScreen, ProcessTable)), ("the process detail", (ProcessDetail,)),
               ("the job detail", (JobDetail,)), ("the idle view", (WasteScreen,)), ("a confirmation", (Confirm,)),
               ("the help screen", (HelpScreen,)), ("the alert list", (AlertsScreen,))]
    return [(where, [b for cls in classes for b in class_bindings(cls)] + everywhere)
            for where, classes in screens]


def _shared_keys(keymap: Mapping[str, str]) -> Iterable[tuple[str, str, Binding, Binding]]:
    """(screen, key, binding, other binding) for each key two actions share once ``keymap`` is
    applied; ``binding`` is a remapped one where either is."""
    for where, bindings in key_scopes():
        by_key: dict[str, list[Binding]] = {}
        for binding in remapped(bindings, keymap):
            by_key.setdefault(binding.key, []).append(binding)
        for key, on_key in by_key.items():
            for i, one in enumerate(on_key):
                for other in on_key[i + 1:]:
                    if one.action == other.action:  # quit = "q,ctrl+q": Textual's ctrl+q quits too
                        continue
                    if other.id in keymap and one.id not in keymap:
                        one, other = other, one
                    yield where, key, one, other


def _pair(one: Binding, other: Binding) -> frozenset:
    return frozenset(((one.id, one.action), (other.id, other.action)))


def _name(binding: Binding) -> str:
    return f'"{binding.description}"' if binding.description else binding.action
