"""The one error type users see: a message that names the file, line or key and what to do."""

from __future__ import annotations


class AdaptiveIRError(Exception):
    """A problem the user can fix. The CLI prints the message (no traceback) and exits with status 2."""


class ConfigError(AdaptiveIRError):
    """A configuration file or command-line override is invalid."""


class DataError(AdaptiveIRError):
    """A data file is missing, malformed or inconsistent."""


class MissingSplitError(DataError):
    """A collection has no split of that name (``split``: the name asked for)."""

    def __init__(self, message: str, split: str):
        super().__init__(message)
        self.split = split


class CheckpointError(AdaptiveIRError):
    """A checkpoint is missing, corrupt or belongs to an incompatible configuration."""


def where(path: object, line: int | None = None, key: str | None = None) -> str:
    """Format a location as ``file:line`` or ``file (key 'x')`` for error messages. `path` is anything whose
    ``str`` names the file: a str, a Path, or a zip member (`adaptive_ir.data.lines.ZipPath`)."""
    loc = str(path)
    if line is not None:
        loc += f":{line}"
    if key is not None:
        loc += f" (key '{key}')"
    return loc
