"""adaptive-ir: batched reinforcement learning for query reformulation.

``adaptive_ir.train(config, **overrides)`` and ``adaptive_ir.evaluate(checkpoint, ...)`` do what the commands of the
same names do (``adaptive_ir/api.py``, which also has ``export``); ``adaptive_ir.inference.reformulate.Reformulator`` rewrites
queries.
"""

import os
import sys
import types

__version__ = "0.1.0"

# bm25s (our stopword list) runs a JAX operation when imported, if JAX is installed (Kaggle's and most GPU images
# have it): on a GPU, JAX would then take 75 % of the GPU's memory for itself, and torch, which does all the work
# here, would run out. JAX, if anything, runs on the CPU; a JAX_PLATFORMS set by the user wins.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from adaptive_ir.api import TrainResult, evaluate, evaluate_pretrained, train  # noqa: E402 - after __version__, which setuptools reads


class _Package(types.ModuleType):
    """The package keeps ``evaluate`` the API function: importing the submodule ``adaptive_ir.evaluation.metrics`` (the
    metrics) would otherwise rebind the package's attribute to it. The submodule stays importable by its full name
    (``from adaptive_ir.evaluation.metrics import ...``)."""

    def __setattr__(self, name: str, value) -> None:
        if name == "evaluate" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

__all__ = ["train", "evaluate", "evaluate_pretrained", "TrainResult", "__version__"]
