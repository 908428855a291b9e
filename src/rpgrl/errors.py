"""Errors a user can fix. The `rpgrl` command prints them as one line and exits with code 2."""


class UsageError(ValueError):
    """Bad user input: an unknown config key, a wrong type, a missing file or column, a malformed row."""
