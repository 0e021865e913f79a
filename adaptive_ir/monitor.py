"""Metrics out: JSONL always, TensorBoard when installed, with CleanRL's tag names (charts/*, losses/*)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

log = logging.getLogger(__name__)


class Monitor:
    """Appends one JSON object per log call to ``<log_dir>/metrics.jsonl`` and mirrors scalars to TensorBoard."""

    def __init__(self, log_dir: str | Path, tensorboard: bool = True):
        self.dir = Path(log_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "metrics.jsonl"
        self._file = open(self.path, "a", encoding="utf-8")
        self.tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # tensorboard is optional at run time; JSONL carries everything
                log.info("tensorboard is not installed; metrics go to %s only", self.path)
            else:
                self.tb = SummaryWriter(str(self.dir))

    def log(self, step: int, scalars: dict[str, float]) -> None:
        row = {"step": step, **{k: (float(v) if v is not None else None) for k, v in scalars.items()}}
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()
        if self.tb is not None:
            for k, v in scalars.items():
                if v is not None:
                    self.tb.add_scalar(k, v, step)

    def close(self) -> None:
        self._file.close()
        if self.tb is not None:
            self.tb.close()


def read_metrics(path: str | Path) -> list[dict]:
    """The rows of a metrics.jsonl (for plots and tests)."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
