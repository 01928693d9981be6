"""The current user's name where the system has none for the uid (containers without a passwd entry)."""

import getpass
import os

import pytest

from gputui.collect.users import current_user


def test_the_login_name_when_there_is_one(monkeypatch):
    monkeypatch.setattr(getpass, "getuser", lambda: "ada")
    assert current_user() == "ada"


@pytest.mark.parametrize("error", [KeyError("getpwuid(): uid not found: 4242"), OSError("No username")])
def test_the_uid_as_psutil_names_it_when_there_is_no_passwd_entry(monkeypatch, error):
    def getuser():
        raise error
    monkeypatch.setattr(getpass, "getuser", getuser)
    assert current_user() == str(os.getuid())


def test_bare_user_flag_without_a_passwd_entry(monkeypatch):
    from gputui.cli import parse

    def getuser():
        raise KeyError("getpwuid(): uid not found")
    monkeypatch.setattr(getpass, "getuser", getuser)
    assert parse(["--demo", "--once", "--user"]).users == (str(os.getuid()),)
