"""One training run from start to end, the same for ``adaptive-ir train``, ``adaptive_ir.train`` and each seed of
``adaptive-ir compare``: claim the run's folders (``rundir.start_run``; under torchrun rank 0 claims them and the
other ranks take the folders it chose), train, test the best checkpoint when asked, and record in run.json how
the run ended (completed, interrupted or failed)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.distributed as dist

from adaptive_ir.common.errors import AdaptiveIRError
from adaptive_ir.config import Config
from adaptive_ir.training.rundir import LOCATION_KEYS, RunDir, start_run
from adaptive_ir.training.trainer import Trainer


class RefusedOnRankZero(Exception):
    """Under torchrun, raised on the ranks other than 0 when rank 0 was refused the run's folders (rank 0 raises
    why, as an AdaptiveIRError)."""


@dataclass
class Trained:
    """What ``run_training`` leaves this process."""

    cfg: Config
    """The config of the run, its folders set to the ones claimed (numbered ones included)."""
    run: RunDir | None
    """The run's folders and run.json, already finished; None on a DDP rank other than 0."""
    trainer: Trainer
    result: dict
    """``Trainer.train``'s summary: updates, best_dev, best_update, interrupted, ..."""
    test: dict[str, dict[str, float]] | None
    """{method: {metric: value}} on the test split when asked for (rank 0, training not interrupted), else None."""
    exit_code: int
    """0, or 130 when a SIGINT stopped training (``RunDir.finish_trained``)."""


def names_folders(overrides: Iterable[str]) -> bool:
    """Whether config overrides (``section.key``) name a folder of the run: folders named by the user are taken as
    named, the config's own are numbered when taken (``start_run``'s ``numbered``)."""
    keys = {f"training.{k}" for k in LOCATION_KEYS}
    return any(k in keys for k in overrides)


def run_training(cfg: Config, *, resume: bool = False, checkpoint: str | Path | None = None,
                 overwrite: bool = False, numbered: bool = False, progress: bool = False, test: bool = False,
                 announce: Callable[[str], None] | None = None) -> Trained:
    """Train ``cfg`` as one run. ``resume`` / ``checkpoint`` / ``overwrite`` / ``numbered``: as ``start_run`` takes
    them; ``test``: evaluate the best checkpoint on test afterwards; ``announce``: called with the run's note (where
    it writes, and why) once its folders are claimed. An exception records the run as failed or interrupted and is
    raised again. Under torchrun the ranks other than 0 write into the folders rank 0 claimed (their ``run`` is
    None), and raise RefusedOnRankZero when it was refused them."""
    cfg, run, resume_from = _claim(cfg, resume, checkpoint, overwrite, numbered)
    if run is not None and announce is not None:
        announce(run.note)
    try:
        trainer = Trainer(cfg, resume=resume_from, progress=progress, run=run.identity if run else None)
        result = trainer.train()
        # rank 0 alone: every rank ends with the same parameters
        tested = trainer.test() if test and trainer.is_main and not result["interrupted"] else None
    except BaseException as e:
        if run is not None:
            run.finish_raised(e)
        raise
    code = run.finish_trained(result, trainer.stop_signal) if run is not None else 0
    return Trained(cfg, run, trainer, result, tested, code)


def _claim(cfg: Config, resume: bool, checkpoint: str | Path | None, overwrite: bool, numbered: bool
           ) -> tuple[Config, RunDir | None, Path | None]:
    """(the config with the folders claimed, RunDir, checkpoint to resume from). Under torchrun rank 0 claims the
    folders and the other ranks take the ones it chose, with RunDir None, or raise RefusedOnRankZero."""
    if not (dist.is_available() and dist.is_initialized()):
        alone = start_run(cfg, resume=resume, checkpoint=checkpoint, overwrite=overwrite, numbered=numbered)
        return alone.cfg, alone, alone.resume_from
    run: RunDir | None = None
    failure: AdaptiveIRError | None = None
    if dist.get_rank() == 0:
        try:
            run = start_run(cfg, resume=resume, checkpoint=checkpoint, overwrite=overwrite, numbered=numbered)
        except AdaptiveIRError as e:
            failure = e  # raised once the other ranks know, so that none waits for a run that never starts
    shared: list[Any] = [None, None]  # rank 0's folders (None: refused) and checkpoint to resume from
    if run is not None:
        shared = [{k: getattr(run.cfg.training, k) for k in LOCATION_KEYS}, run.resume_from]
    dist.broadcast_object_list(shared, src=0)
    if failure is not None:
        raise failure
    if shared[0] is None:
        raise RefusedOnRankZero
    if run is not None:
        return run.cfg, run, run.resume_from
    cfg = copy.deepcopy(cfg)
    for k, v in shared[0].items():
        setattr(cfg.training, k, v)
    return cfg, None, shared[1]


__all__ = ["RefusedOnRankZero", "Trained", "names_folders", "run_training"]
