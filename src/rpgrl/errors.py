"""Errors a user can fix. The `rpgrl` command prints them as one line and exits with code 2."""

import argparse


class UsageError(ValueError):
    """Bad user input: an unknown config key, a wrong type, a missing file or column, a malformed row."""


def first_line(e: BaseException) -> str:
    """The first non-empty line of an exception's message, or its type name when it has none (for one-line errors)."""
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


class ArgumentParser(argparse.ArgumentParser):
    """argparse for the `rpgrl` subcommands: a parse error raises UsageError (one line, exit code 2 from `rpgrl`)
    instead of printing the usage block and exiting."""

    def error(self, message: str):
        raise UsageError(f"{message} (see {self.prog} --help)")
