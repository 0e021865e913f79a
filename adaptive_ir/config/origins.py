"""Where each config key's value came from (a file's line or a ``--set`` flag): what every config error names."""

from __future__ import annotations

from adaptive_ir.common.errors import where


class Origins:
    """Where each key's value came from (file line or --set flag), so every error points at what to fix."""

    def __init__(self, source: str, lines: dict[str, int]):
        self.source = source
        self.lines = lines
        self.given: dict[str, str] = {}
        """section.key -> location, for every key the file or an override set."""

    def __call__(self, dotted: str) -> str:
        return self.given.get(dotted) or where(self.source, self.lines.get(dotted), dotted)

    def line(self, dotted: str) -> str:
        """``file:line`` of a key, for warnings that name the key themselves."""
        return where(self.source, self.lines.get(dotted))
