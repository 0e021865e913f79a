"""Metrics out: JSONL always, TensorBoard when installed, with CleanRL's tag names (charts/*, losses/*).

Every row says where training stood: ``update`` (PPO updates done), ``global_step`` (environment steps, CleanRL's
x axis) and ``episodes``; TensorBoard's step axis is ``global_step``. A resumed run starts from its checkpoint's
position, so the log is cut back to it first: rows of later updates (written before the run stopped, and about to
be replayed) are dropped from metrics.jsonl, and TensorBoard purges its events after that step (``purge_step``).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from adaptive_ir.common.io import atomic_write_bytes

log = logging.getLogger(__name__)


class Monitor:
    """Appends one JSON object per log call to ``<log_dir>/metrics.jsonl`` and mirrors scalars to TensorBoard.

    ``resume``: (update, global_step) of the checkpoint a resumed run starts from; the log keeps what came before.
    """

    def __init__(self, log_dir: str | Path, resume: tuple[int, int] | None = None, tensorboard: bool = True):
        self.dir = Path(log_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "metrics.jsonl"
        if resume is not None and self.path.is_file():
            kept = [r for r in _rows(self.path) if _update(r) <= resume[0]]
            atomic_write_bytes(self.path, "".join(json.dumps(r) + "\n" for r in kept).encode("utf-8"))
        self._file = open(self.path, "a", encoding="utf-8")
        self.tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # tensorboard is optional at run time; JSONL carries everything
                log.info("tensorboard is not installed; metrics go to %s only", self.path)
            else:
                # events at steps >= purge_step are dropped: everything after the checkpoint's global step
                self.tb = SummaryWriter(str(self.dir), purge_step=None if resume is None else resume[1] + 1)

    def log(self, update: int, scalars: dict[str, float], global_step: int | None = None,
            episodes: int | None = None) -> None:
        """One row at ``update``; ``global_step`` (environment steps so far, the TensorBoard axis; the update
        number when not given) and ``episodes`` say how much experience it stands for."""
        step = update if global_step is None else global_step
        row = {"update": update, "global_step": step, "episodes": episodes,
               **{k: (float(v) if v is not None else None) for k, v in scalars.items()}}
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


def _rows(path: Path) -> list[dict]:
    """The whole rows of a log; a line cut short by a kill mid-write is dropped."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def _update(row: dict) -> int:
    return row["update"] if "update" in row else row["step"]  # "step": logs written before global_step was


def read_metrics(path: str | Path) -> list[dict]:
    """The rows of a metrics.jsonl (for plots and tests); the last line of a run killed mid-write is left out."""
    return _rows(Path(path))
