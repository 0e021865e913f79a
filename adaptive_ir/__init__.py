"""adaptive-ir: batched reinforcement learning for query reformulation."""

__version__ = "0.1.0"
