"""gputui.files: small files named from outside are read with a bound, never blocking."""

from __future__ import annotations

import os

import pytest

from gputui.errors import UserError
from gputui.files import check_private, read_small


def test_reads_a_regular_file(tmp_path):
    path = tmp_path / "config.toml"
    path.write_bytes(b"interval = 2\n")
    assert read_small(path, 100, "config file") == b"interval = 2\n"


def test_refuses_a_fifo_at_once(tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    with pytest.raises(UserError, match=r"config file .*fifo is not a regular file"):
        read_small(path, 100, "config file")


def test_refuses_a_device_that_never_ends():
    with pytest.raises(UserError, match="/dev/zero is not a regular file"):
        read_small("/dev/zero", 1 << 20, "users file")


def test_refuses_a_file_over_the_limit(tmp_path):
    path = tmp_path / "big"
    path.write_bytes(b"x" * 101)
    with pytest.raises(UserError, match="is 101 bytes; the limit is 100"):
        read_small(path, 100, "report")


def test_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(UserError, match=r"cannot read config file .*nowhere: No such file"):
        read_small(tmp_path / "nowhere", 100, "config file")


def test_the_path_is_shown_escaped(tmp_path):
    path = tmp_path / "evil\x1b]0;owned\x07"
    os.mkfifo(path)
    with pytest.raises(UserError) as caught:
        read_small(path, 100, "config file")
    assert "\x1b" not in str(caught.value) and "\\x1b]0;owned\\x07" in str(caught.value)


def test_private_files_refuse_other_writers(tmp_path):
    path = tmp_path / "users"
    path.write_text("alice:hash\n")
    path.chmod(0o600)
    check_private(os.stat(path), path, "users file")
    path.chmod(0o620)
    with pytest.raises(UserError, match="may be written by other users .mode 620.; run: chmod go-w"):
        check_private(os.stat(path), path, "users file")
    path.chmod(0o602)
    with pytest.raises(UserError, match="other users"):
        check_private(os.stat(path), path, "users file")


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_private_files_refuse_another_owner(tmp_path):
    path = tmp_path / "users"
    path.write_text("alice:hash\n")
    path.chmod(0o600)
    os.chown(path, 4242, 4242)
    with pytest.raises(UserError, match="belongs to uid 4242, not to you"):
        check_private(os.stat(path), path, "users file")
