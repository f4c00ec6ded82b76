"""Errors shared across the node's packages."""


class CliError(Exception):
    """A user-facing command-line error: printed as one line, exit status 2."""
