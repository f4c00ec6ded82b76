"""Errors of the quadtree package's command line."""
from __future__ import annotations


class QuadtreeUsageError(Exception):
    """``interchange quadtree`` was given something it cannot use (a bad number, zoom or area).

    The message is written for a person: the command line prints it as one line, exit status 2.
    """
