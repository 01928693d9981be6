"""gputui's config file: defaults, valid settings, the flags over it, and one clear line for every bad
value."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from cli_helpers import ROOT

from gputui.cli import parse
from gputui.config import CONFIG_LIMIT, Config, ConfigError, check_binding_ids, default_path, load_config, resolve
from gputui.errors import UserError


def write(tmp_path, text):
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_default_path_follows_xdg(tmp_path):
    assert default_path({"XDG_CONFIG_HOME": "/x"}).as_posix() == "/x/gputui/config.toml"
    assert default_path({"HOME": "/home/ann"}).as_posix() == "/home/ann/.config/gputui/config.toml"


def test_missing_default_file_means_defaults(tmp_path):
    config = load_config(environ={"XDG_CONFIG_HOME": str(tmp_path)})
    assert (config.interval, config.theme, config.columns, config.keys) == (None, None, None, {})


def test_reads_every_setting(tmp_path):
    (tmp_path / "gputui").mkdir()
    write(tmp_path / "gputui", 'interval = 2\ntheme = "light"\ncolumns = ["pid", "command", "pid"]\n'
                               '[keys]\nquit = "q,ctrl+q"\n')
    config = load_config(environ={"XDG_CONFIG_HOME": str(tmp_path)})
    assert config.interval == 2.0 and config.theme == "light"
    assert config.columns == ("pid", "command")
    assert config.keys == {"quit": "q,ctrl+q"}


@pytest.mark.parametrize("text, words", [
    ("interval = 0", "`interval` must be a positive number of seconds (0.1 or more), not 0"),
    ("interval = -2", "`interval` must be a positive number of seconds (0.1 or more), not -2"),
    ('interval = "fast"', "`interval` must be a number of seconds, not 'fast'"),
    ("interval = true", "`interval` must be a number of seconds, not True"),
    ('theme = "pink"', "`theme` must be one of dark, light, not 'pink'"),
    ('columns = ["pid", "colour"]', "`columns` has unknown column 'colour'"),
    ("columns = []", "`columns` must be a non-empty list of column names"),
    ("[keys]\nquit = 3", "`keys` must be a table of binding id"),
    ("refresh = 1", "`refresh` is not a setting (known: interval, theme, columns, keys, hosts, alerts, waste)"),
    ("interval = = 1", "is not valid TOML"),
])
def test_bad_values_are_user_errors_naming_the_key(tmp_path, text, words):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert isinstance(caught.value, UserError)
    assert str(path) in str(caught.value) and words in str(caught.value)


def test_explicit_missing_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")


def test_a_config_that_is_not_utf8_names_the_byte_and_its_offset(tmp_path):
    path = tmp_path / "config.toml"
    path.write_bytes(b'theme = "\xfflight"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == f"config file {path} is not UTF-8 text: byte 0xff at offset 9"


def test_a_device_as_config_is_refused_without_reading_it():
    with pytest.raises(ConfigError) as caught:
        load_config("/dev/zero")
    assert str(caught.value) == "config file /dev/zero is not a regular file"
    # but /dev/null, the usual way to ask for no settings, still means the defaults
    assert load_config(os.devnull) == Config(path=Path(os.devnull))


def test_a_fifo_as_config_is_refused_at_once(tmp_path):
    fifo = tmp_path / "config.toml"
    os.mkfifo(fifo)
    said = []

    def load():
        try:
            load_config(fifo)
        except ConfigError as exc:
            said.append(str(exc))

    reader = threading.Thread(target=load, daemon=True)
    started = time.monotonic()
    reader.start()
    reader.join(5)
    took = time.monotonic() - started
    if reader.is_alive():  # blocked in open(): a writer's open lets it go before the test ends
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert said == [f"config file {fifo} is not a regular file"] and took < 1.0


def test_a_config_over_the_limit_is_refused(tmp_path):
    path = write(tmp_path, "# " + "x" * CONFIG_LIMIT + "\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == f"config file {path} is {CONFIG_LIMIT + 3} bytes; the limit is {CONFIG_LIMIT}"
    assert CONFIG_LIMIT == 1 << 20


@pytest.mark.parametrize("value", ["[" * 5000 + "]" * 5000, "{a = " * 5000 + "1" + "}" * 5000],
                         ids=["arrays", "tables"])
def test_a_config_nested_too_deeply_is_one_error(tmp_path, value):
    path = write(tmp_path, f"interval = {value}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == f"{path} is not valid TOML: nested too deeply"


def test_unknown_binding_id_is_an_error(tmp_path):
    config = load_config(write(tmp_path, '[keys]\nexplode = "x"\n'))
    with pytest.raises(ConfigError, match="unknown binding 'explode'"):
        check_binding_ids(config, {"quit", "tree"})
    check_binding_ids(load_config(write(tmp_path, '[keys]\ntree = "y"\n')), {"quit", "tree"})


@pytest.mark.parametrize("keys, said", [
    ('quit = "j"', 'quit = "j": j is already "Jobs" (binding jobs) on the main screen; give one of them another key'),
    ('jobs = "q"', 'jobs = "q": q is already "Quit" (binding quit) on the main screen; give one of them another key'),
    ('tree = "u"\nmine = "v"', None),  # u is free again once mine moves away
    ('tree = "v"\nmine = "v"', 'tree = "v": v is already "Mine" (binding mine) on the main screen; '
                               'give one of them another key'),
    ('quit = "tab"', 'quit = "tab": tab is already "Focus Next" (built into Textual, not remappable) on the '
                     'main screen; choose another key'),
    ('help = "escape"', 'help = "escape": escape is already "Clear filter" (binding filter.clear) on the main '
                        'screen; give one of them another key'),
    ('"detail.sites" = "backspace"', 'detail.sites = "backspace": backspace is already "Back" (binding detail.back) '
                                   'on the process detail; give one of them another key'),
    ('quit = "q,ctrl+q"', None),  # Textual's own ctrl+q quits too: the same action, no clash
    ('quit = "x"\n"help.close" = "z"', 'quit = "x": x is already "Speed" (binding replay.speed) on the main screen; '
                                     'give one of them another key'),
    ('quit = "z"\n"help.close" = "z"', None),  # on the help screen its own key wins, as q does by default
    ('"detail.sites" = "t"', None),  # t is the tree on the main screen, not on the detail screen
])
def test_a_remap_onto_a_key_in_use_is_refused_with_both_named(tmp_path, keys, said):
    from gputui.ui.startup.keys import check_keymap

    path = write(tmp_path, f"[keys]\n{keys}\n")
    config = load_config(path)
    if said is None:
        check_keymap(config)
        return
    with pytest.raises(ConfigError) as caught:
        check_keymap(config)
    assert str(caught.value) == f"{path}: [keys] {said}"


def test_the_live_monitor_stops_on_a_bad_config_before_drawing(tmp_path, capsys, monkeypatch):
    from gputui import cli

    def draw(options):
        raise AssertionError("the monitor started")

    monkeypatch.setattr("gputui.ui.startup.launch.run_tui", draw)
    path = write(tmp_path, 'theme = "pink"')
    assert cli.main(["--demo", "--config", str(path)]) == 2
    assert capsys.readouterr().err == f"gputui: {path}: `theme` must be one of dark, light, not 'pink'\n"


@pytest.mark.parametrize("text, said", [
    ("interval = 0", "`interval` must be a positive number of seconds (0.1 or more), not 0"),
    ('theme = "pink"', "`theme` must be one of dark, light, not 'pink'"),
    ('[alerts]\noom_within = "soon"',
     '`alerts.oom_within` must be a duration such as "30m", "1h", "90s", not \'soon\''),
    ("[waste]\nidle_util = 300", "`waste.idle_util` must be a percentage above 0 and at most 100, not 300"),
    ('columns = ["pid", "colour"]', "`columns` has unknown column 'colour' (known: host, pid, probe, user, owner, gpu, "
                                     "type, gpu_memory, trend, trend_mark, sm, memory_util, cpu, host_memory, elapsed, "
                                     "started, command)"),
])
def test_a_bad_value_is_one_line_naming_the_file_the_key_and_what_is_allowed(tmp_path, text, said):
    """End to end: the line and nothing else (the whole example file followed it, 16 lines in all)."""
    path = write(tmp_path, text + "\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CONFIG_HOME": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "gputui", "--demo", "--config", str(path), "--once"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert (result.returncode, result.stderr, result.stdout) == (2, f"gputui: {path}: {said}\n", "")


def test_the_flags_win_over_the_file_and_the_file_over_the_defaults(tmp_path):
    config = load_config(write(tmp_path, 'interval = 2\ntheme = "light"\ncolumns = ["pid", "command"]\n'
                                         '[keys]\ntree = "y"\n[alerts]\noom_within = "20m"\nfree_after = "5m"\n'
                                         '[waste]\nidle_after = "5m"\nidle_util = 3\n'))
    given = resolve(parse(["--theme", "dark", "--alert-oom-within", "1h", "--idle-util", "7"]), config)
    assert (given.interval, given.theme, given.columns, dict(given.keys)) == (2.0, "dark", ("pid", "command"),
                                                                              {"tree": "y"})
    assert (given.alerts.thresholds.oom_within, given.alerts.thresholds.free_after) == (3600.0, 300.0)
    assert (given.waste.idle_after, given.waste.max_util) == (300.0, 7.0)
    plain = resolve(parse([]), Config())
    assert (plain.interval, plain.theme, plain.alerts.thresholds.oom_within, plain.waste.max_util) == (
        None, None, 1800.0, 5.0)


def test_the_file_interval_is_the_live_monitors_only(tmp_path):
    config = load_config(write(tmp_path, "interval = 2\n"))
    assert resolve(parse(["--demo", "serve"]), config).interval is None  # serve's own default (5 s)
    assert resolve(parse(["--demo", "record", "r.rec"]), config).interval is None
    assert resolve(parse(["--demo", "--interval", "3", "serve"]), config).interval == 3.0


def test_a_bad_flag_over_the_file_names_the_flag(tmp_path):
    with pytest.raises(UserError) as caught:
        resolve(parse(["--idle-util", "300"]), Config())
    assert str(caught.value) == "--idle-util must be a percentage above 0 and at most 100, not '300'"
