"""Errors a user can fix. The `rpgrl` command prints them as one line and exits with code 2."""


class UsageError(ValueError):
    """Bad user input: an unknown config key, a wrong type, a missing file or column, a malformed row."""


def first_line(e: BaseException) -> str:
    """The first non-empty line of an exception's message, or its type name when it has none (for one-line errors)."""
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__
