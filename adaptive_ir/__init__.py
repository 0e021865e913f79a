"""adaptive-ir: batched reinforcement learning for query reformulation.

The package's face: ``train(config, **overrides)``, ``evaluate(checkpoint, ...)``, ``evaluate_pretrained(policy,
data_dir)`` and ``export(checkpoint, folder)`` do what the commands of the same names do (``api.py``, which returns
a ``TrainResult``); ``Reformulator.load(checkpoint)`` or ``Reformulator.from_pretrained(policy)``, then
``.reformulate(queries)``, rewrites queries (``inference/reformulate.py``). Below them, one subpackage per stage:
common, config, data, retrieval, mining, rl, evaluation, artifacts, training, inference.
"""

import os
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# bm25s (our stopword list) runs a JAX operation when imported, if JAX is installed (Kaggle's and most GPU images
# have it): on a GPU, JAX would then take 75 % of the GPU's memory for itself, and torch, which does all the work
# here, would run out. JAX, if anything, runs on the CPU; a JAX_PLATFORMS set by the user wins.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# after __version__, which setuptools reads
from adaptive_ir.api import TrainResult, evaluate, evaluate_pretrained, export, train  # noqa: E402

if TYPE_CHECKING:
    from adaptive_ir.inference.reformulate import Reformulator


def __getattr__(name: str):
    # Reformulator is imported on first use: its module imports the retrieval, mining and RL stages, which
    # `import adaptive_ir` (and the command line's --help) would otherwise wait for
    if name == "Reformulator":
        from adaptive_ir.inference.reformulate import Reformulator

        globals()["Reformulator"] = Reformulator
        return Reformulator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Reformulator", "TrainResult", "__version__", "evaluate", "evaluate_pretrained", "export", "train"]
