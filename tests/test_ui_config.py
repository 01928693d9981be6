"""The monitor's config file: defaults, valid settings, and a clear error for every bad value."""

import pytest

from gputui.errors import UserError
from gputui.ui.config import ConfigError, check_binding_ids, default_path, load_config


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
    ("interval = 0", "`interval` must be between 0.1 and 3600 seconds, not 0"),
    ('interval = "fast"', "`interval` must be a number of seconds, not 'fast'"),
    ("interval = true", "`interval` must be a number of seconds, not True"),
    ('theme = "pink"', "`theme` must be one of dark, light, not 'pink'"),
    ('columns = ["pid", "colour"]', "`columns` has unknown column 'colour'"),
    ("columns = []", "`columns` must be a non-empty list of column names"),
    ("[keys]\nquit = 3", "`keys` must be a table of binding id"),
    ("refresh = 1", "`refresh` is not a setting (known: interval, theme, columns, keys, hosts)"),
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


def test_unknown_binding_id_is_an_error(tmp_path):
    config = load_config(write(tmp_path, '[keys]\nexplode = "x"\n'))
    with pytest.raises(ConfigError, match="unknown binding 'explode'"):
        check_binding_ids(config, {"quit", "tree"})
    check_binding_ids(load_config(write(tmp_path, '[keys]\ntree = "y"\n')), {"quit", "tree"})


def test_run_tui_stops_on_a_bad_config_before_drawing(tmp_path):
    from gputui.cli import parse
    from gputui.ui.launch import run_tui

    path = write(tmp_path, 'theme = "pink"')
    with pytest.raises(ConfigError, match="theme"):
        run_tui(parse(["--demo", "--config", str(path)]))
