"""adaptive-ir: batched reinforcement learning for query reformulation.

``adaptive_ir.train(config, **overrides)``, ``adaptive_ir.evaluate(checkpoint, ...)`` and
``adaptive_ir.export(checkpoint, folder)`` do what the commands of the same names do (``adaptive_ir/api.py``);
``adaptive_ir.reformulate.Reformulator`` rewrites queries.
"""

__version__ = "0.1.0"

from .api import TrainResult, evaluate, export, train  # noqa: E402 - after __version__, which setuptools reads

__all__ = ["train", "evaluate", "export", "TrainResult", "__version__"]
