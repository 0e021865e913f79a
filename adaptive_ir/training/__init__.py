"""Training: one run from start to end, the same for ``adaptive-ir train``, ``adaptive_ir.train`` and each seed of
``adaptive-ir compare`` (``run``: ``run_training``), the loop itself (``trainer``: precompute, PPO updates,
checkpoints, resume, DDP), where its episodes come from (``sources``: each collection's train queries in seeded
epochs, one collection drawn per update), which checkpoint it keeps (``selection``: dev scores, the best so far,
patience), the run's folder, lock and run.json (``rundir``) and its metric log (``monitor``)."""

from adaptive_ir.training.monitor import Monitor, read_metrics
from adaptive_ir.training.run import RefusedOnRankZero, Trained, names_folders, run_training
from adaptive_ir.training.rundir import RunDir, start_run
from adaptive_ir.training.trainer import Trainer

__all__ = ["Monitor", "RefusedOnRankZero", "RunDir", "Trained", "Trainer", "names_folders", "read_metrics",
           "run_training", "start_run"]
