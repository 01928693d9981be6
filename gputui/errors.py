"""Errors meant for the person at the terminal: the CLI prints the message and exits with 2."""


class UserError(Exception):
    """An expected condition (no driver, bad config, unknown pid) with a message for the user."""

    exit_code = 2
