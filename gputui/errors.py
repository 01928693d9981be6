"""Errors meant for the person at the terminal: the CLI prints the message and exits with 2."""


class UserError(Exception):
    """An expected condition (no driver, bad config, unknown pid) with a message for the user."""

    exit_code = 2
    # True where the message's own line breaks are meant (an example file after the problem); its
    # outside parts must then be made visible where it is written, because the CLI keeps its "\n".
    multiline = False
