"""The one exception type users see: a clean, one-line reason about one file."""
from __future__ import annotations


class TraceError(Exception):
    """Input we cannot read. ``str(err)`` is ``"<path>: <reason>"``, one line."""

    def __init__(self, path: object, reason: str):
        self.path = str(path)
        self.reason = " ".join(str(reason).split())  # always one line
        super().__init__(f"{self.path}: {self.reason}")
